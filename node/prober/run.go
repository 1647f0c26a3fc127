package prober

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/mounters"
)

const (
	// defaultProbeTimeout bounds a probe: it reads a few KiB, so only a medium that makes the
	// parser loop or a device that does not answer takes that long.
	defaultProbeTimeout = 10 * time.Second
	// CacheTTL is how long a look at a medium is reused for the same device (same identity,
	// kernel name, size, device number and disk sequence number): a metrics scrape and a
	// GetCapacity poll start no process per device each, and a medium plugged, pulled or written
	// by the host is seen within that time (a re-plug changes the disk sequence at once).
	CacheTTL = 2 * time.Second
	// probeReapWait is how long a prober killed at its time limit is waited for: one stuck in
	// a read of the device ends only when the read does, and is then reaped in the background.
	probeReapWait = 2 * time.Second
	// maxProbeStderr bounds what is kept of a prober's standard error, for the reason it failed.
	maxProbeStderr = 4 << 10
)

// probeTimeout is ProbeTimeout with its default.
func probeTimeout(c mounters.Config) time.Duration {
	if c.ProbeTimeout <= 0 {
		return defaultProbeTimeout
	}
	return c.ProbeTimeout
}

// probeCommand is the command that runs a prober: ProbeCommand, or the mounter's binary with
// "probe-medium".
func probeCommand(c mounters.Config) ([]string, error) {
	if len(c.ProbeCommand) > 0 {
		return c.ProbeCommand, nil
	}
	command, err := c.MounterCommand()
	if err != nil {
		return nil, err
	}
	return []string{command[0], "probe-medium"}, nil
}

// Run runs a prober as c says on dev (its descriptor 3), a medium of size bytes and logical
// block size lbs at path, and reads its answer; an error says why there is none: the prober
// failed, was killed at the time limit, or answered what cannot be true.
func Run(c mounters.Config, dev *os.File, path string, size int64, lbs int) (*Result, error) {
	command, err := probeCommand(c)
	if err != nil {
		return nil, err
	}
	cmd, exe, err := c.UnprivilegedCommand(command, []*os.File{dev},
		"--device="+path, "--size="+strconv.FormatInt(size, 10), "--block-size="+strconv.Itoa(lbs))
	if err != nil {
		return nil, err
	}
	defer exe.Close()
	stdout := &cappedBuffer{max: protocol.MaxProbeAnswer}
	stderr := &cappedBuffer{max: maxProbeStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// It dies with this process, and its pipes are not waited for long once it is gone (were
	// they passed on to a process of its own).
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the probe of %s: %w", path, err)
	}
	exe.Close()
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timeout := probeTimeout(c)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err = <-done:
	case <-timer.C:
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(probeReapWait):
		}
		return nil, fmt.Errorf("the probe of %s (pid %d) did not answer within %v: killed", path, pid, timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("the probe of %s (pid %d) failed: %v%s", path, pid, err, firstLine(stderr.Bytes()))
	}
	if stdout.over {
		return nil, fmt.Errorf("the probe of %s (pid %d) answered more than %d bytes: refused", path, pid, protocol.MaxProbeAnswer)
	}
	r, err := parseAnswer(stdout.Bytes(), size, lbs)
	if err != nil {
		return nil, fmt.Errorf("the probe of %s (pid %d) answered what cannot be true: %w", path, pid, err)
	}
	return r, nil
}
