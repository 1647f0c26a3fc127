package mounters

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// mounterCommand is the command that runs a mounter: Command, or this executable's "mounter".
func (c Config) MounterCommand() ([]string, error) {
	if len(c.Command) > 0 {
		return c.Command, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{exe, "mounter"}, nil
}

// credential is the unprivileged user and group mounters and probes run as: UID and GID, by
// default nobody.
func (c Config) credential() *syscall.Credential {
	uid, gid := uint32(nobody), uint32(nobody)
	if c.UID != nil {
		uid = *c.UID
	}
	if c.GID != nil {
		gid = *c.GID
	}
	// No supplementary groups: none of root's (disk, for one) comes along.
	return &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
}

// unprivilegedCommand prepares command (a csi-fat binary and its subcommand, then args) to run
// as the unprivileged user of credential: a change of user from root to another leaves a
// process no capability. files become its descriptors from 3 on. The binary is opened here and
// executed through /proc/self/fd, as the descriptor after files, so that the unprivileged user
// can run it even from a directory only root may search (go run, go test); the command is told
// to close that descriptor (--close-fds). The caller closes the returned binary once the command
// started, and sets the output and what else the command needs.
func (c Config) UnprivilegedCommand(command []string, files []*os.File, args ...string) (*exec.Cmd, *os.File, error) {
	exe, err := os.Open(command[0])
	if err != nil {
		return nil, nil, fmt.Errorf("binary to run unprivileged: %w", err)
	}
	exeFD := strconv.Itoa(3 + len(files))
	argv := append([]string{}, command...)
	argv = append(argv, args...)
	argv = append(argv, "--close-fds="+exeFD)
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, k := range []string{protocol.FaultEnv, protocol.VersionEnv} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return &exec.Cmd{
		Path:        "/proc/self/fd/" + exeFD,
		Args:        argv,
		Env:         env,
		Dir:         "/",
		ExtraFiles:  append(append([]*os.File{}, files...), exe),
		SysProcAttr: &syscall.SysProcAttr{Credential: c.credential()},
	}, exe, nil
}
