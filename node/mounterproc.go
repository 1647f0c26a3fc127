package node

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Where FUSE servers run.
const (
	// MounterInProcess serves every volume in the plugin's own process: a restart of the plugin
	// kills every mount. The zero Config's mode.
	MounterInProcess = "inprocess"
	// MounterProcess serves each volume in a mounter process of its own, started by the plugin
	// in a session of its own and as an unprivileged user, which outlives the plugin.
	MounterProcess = "process"
)

// MounterConfig says where and how volumes are served.
type MounterConfig struct {
	// Mode is MounterInProcess ("" too), MounterProcess or MounterPod.
	Mode string `json:"mode,omitempty"`
	// Pod makes the pods of MounterPod; with it, orphaned mounter pods are removed in any mode.
	Pod *PodConfig `json:"pod,omitempty"`
	// Command runs a mounter: the csi-fat binary and "mounter" (default: this executable).
	Command []string `json:"command,omitempty"`
	// UID and GID the mounter runs as (default 65534, nobody); the mounter needs no privilege.
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`
	// CheckTimeout bounds the check and repair before serving (default 10 minutes): a mounter
	// that takes longer, say on a hostile image that makes the checker loop, is killed.
	CheckTimeout time.Duration `json:"checkTimeout,omitempty"`
	// ProbeTimeout bounds a look at what a removable medium holds (default 10 seconds), done in
	// a short-lived unprivileged process of its own outside MounterInProcess: one that takes
	// longer is killed and the medium reported unreadable.
	ProbeTimeout time.Duration `json:"probeTimeout,omitempty"`
	// ProbeCommand runs that look instead of Command's binary with "probe-medium"; only tests
	// set it, to stand in a prober that misbehaves.
	ProbeCommand []string `json:"probeCommand,omitempty"`
}

// process tells whether volumes are served by mounters (processes or pods), not in this process.
func (c MounterConfig) process() bool { return c.Mode == MounterProcess || c.Mode == MounterPod }

// checkTimeout is CheckTimeout with its default.
func (c MounterConfig) checkTimeout() time.Duration {
	if c.CheckTimeout <= 0 {
		return defaultCheckTimeout
	}
	return c.CheckTimeout
}

func (c MounterConfig) validate() error {
	switch c.Mode {
	case "", MounterInProcess, MounterProcess:
		return nil
	case MounterPod:
		if c.Pod == nil || c.Pod.Pods == nil || c.Pod.Namespace == "" || c.Pod.Image == "" || c.Pod.KubeletDir == "" {
			return fmt.Errorf("mounter mode %s needs an API client, a namespace, an image and the kubelet's directory", MounterPod)
		}
		return nil
	}
	return fmt.Errorf("mounter mode %q: want %s, %s or %s", c.Mode, MounterPod, MounterProcess, MounterInProcess)
}

// nobody is the default user and group of a mounter.
const nobody = 65534

const (
	// callTimeout bounds a control request other than check and stop.
	callTimeout = 10 * time.Second
	// serveTimeout bounds the serve request: opening the volume reads its FAT.
	serveTimeout = 2 * time.Minute
	// defaultCheckTimeout bounds the check before serving.
	defaultCheckTimeout = 10 * time.Minute
)

// mountersDir is the state directory's subdirectory of mounter sockets and logs.
const mountersDir = "mounters"

// mounterProc is a mounter serving one volume, started by this process or adopted from an
// earlier one: a process of this host's, or a pod.
type mounterProc struct {
	volume  string // the volume's ID
	socket  string
	logPath string    // a process's log; a pod's is the container's
	pid     int       // in the mounter's own PID namespace for a pod
	cmd     *exec.Cmd // nil when adopted or a pod
	pod     *podRef   // nil for a process
	podCfg  *PodConfig

	gone     chan struct{} // closed once the mounter is gone
	goneOnce sync.Once
	mu       sync.Mutex
	why      string // how it ended
}

func (p *mounterProc) record() *volume.MounterRecord {
	r := &volume.MounterRecord{PID: p.pid, Socket: p.socket, Log: p.logPath}
	if p.pod != nil {
		r.Namespace, r.Pod, r.PodUID = p.pod.namespace, p.pod.name, string(p.pod.uid)
	}
	return r
}

// String names the mounter in logs and conditions.
func (p *mounterProc) String() string {
	if p.pod != nil {
		return "pod " + p.pod.String()
	}
	return fmt.Sprintf("pid %d", p.pid)
}

// recordedMounter is the mounter a record names.
func (m *Manager) recordedMounter(r *volume.MounterRecord, volume string) *mounterProc {
	p := &mounterProc{volume: volume, socket: r.Socket, logPath: r.Log, pid: r.PID, gone: make(chan struct{})}
	if r.PodUID != "" {
		p.pod = &podRef{namespace: r.Namespace, name: r.Pod, uid: types.UID(r.PodUID)}
		p.podCfg = m.cfg.Mounter.Pod
	}
	return p
}

func (p *mounterProc) ended(why string) {
	p.goneOnce.Do(func() {
		p.mu.Lock()
		p.why = why
		p.mu.Unlock()
		close(p.gone)
	})
}

func (p *mounterProc) isGone() bool {
	select {
	case <-p.gone:
		return true
	default:
		return false
	}
}

// settle waits a moment for a mounter whose connection failed to be seen gone, so that what
// is reported names how it ended; it tells whether it is gone.
func (p *mounterProc) settle() bool {
	select {
	case <-p.gone:
		return true
	case <-time.After(3 * time.Second):
		return false
	}
}

// endedWhy says how the mounter ended.
func (p *mounterProc) endedWhy() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.why
}

// call sends one request and waits for the answer.
func (p *mounterProc) call(req *protocol.Request, timeout time.Duration, fds ...int) (*protocol.Response, error) {
	c, err := dialMounter(p.socket, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	req.Volume = p.volume
	return protocol.Call(c, req, timeout, fds...)
}

func dialMounter(socket string, timeout time.Duration) (*net.UnixConn, error) {
	d := net.Dialer{Timeout: timeout}
	addr := socket
	if len(addr) > unixPathMax {
		// A pod's socket under a long kubelet directory: reach it through a descriptor of its
		// directory, whose /proc/self/fd path is short.
		dir, err := os.OpenFile(filepath.Dir(socket), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil, fmt.Errorf("connect to mounter at %s: %w", socket, err)
		}
		defer dir.Close()
		addr = fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(socket))
	}
	c, err := d.Dial("unixpacket", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to mounter at %s: %w", socket, err)
	}
	return c.(*net.UnixConn), nil
}

// watch holds a connection on which the mounter never answers: its end is the mounter's.
func (p *mounterProc) watch() error {
	c, err := dialMounter(p.socket, callTimeout)
	if err != nil {
		return err
	}
	if err := protocol.Send(c, &protocol.Request{Version: protocol.Version, Op: protocol.OpWatch, Volume: p.volume}); err != nil {
		c.Close()
		return err
	}
	go func() {
		defer c.Close()
		var resp protocol.Response
		files, err := protocol.Receive(c, &resp, time.Time{})
		for _, f := range files {
			f.Close()
		}
		if p.pod != nil {
			p.ended(p.podEnded(err))
			return
		}
		if p.cmd != nil {
			// The exit status says more: wait for it a moment.
			select {
			case <-p.gone:
				return
			case <-time.After(2 * time.Second):
			}
		}
		p.ended(fmt.Sprintf("the mounter (pid %d) is gone: its control connection ended (%v)", p.pid, err))
	}()
	return nil
}

// mounterSocket is where the mounter of the named volume listens: a hash keeps the path short
// (a unix socket's path has at most 107 bytes) and any name safe.
func (m *Manager) mounterSocket(name string) (socket, logPath string, err error) {
	base := filepath.Join(m.cfg.StateDir, mountersDir, volumeHash(name))
	socket = base + ".sock"
	if len(socket) > unixPathMax {
		return "", "", fmt.Errorf("mounter socket path %s is longer than a unix socket path may be (%d bytes): use a shorter --state-dir", socket, unixPathMax)
	}
	return socket, base + ".log", nil
}

// unixPathMax is the longest path a unix socket address holds.
const unixPathMax = 107

// startMounter starts a mounter for the volume, a pod or a process as configured.
func (m *Manager) startMounter(rec volume.Record) (*mounterProc, error) {
	if m.cfg.Mounter.Mode == MounterPod {
		return m.startMounterPod(rec)
	}
	return m.spawnMounter(rec)
}

// spawnMounter starts a mounter process for the volume: in a session of its own (the plugin's exit
// does not end it), as an unprivileged user with no capabilities, listening on a socket this
// process creates (the mounter may not create files in the state directory) and logging to a
// file this process opens.
func (m *Manager) spawnMounter(rec volume.Record) (*mounterProc, error) {
	socket, logPath, err := m.mounterSocket(rec.Name)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return nil, err
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("mounter socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	lf, err := l.File()
	l.Close()
	if err != nil {
		os.Remove(socket)
		return nil, err
	}
	defer lf.Close()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		os.Remove(socket)
		return nil, err
	}
	defer logFile.Close()
	command, err := m.cfg.Mounter.mounterCommand()
	if err != nil {
		os.Remove(socket)
		return nil, err
	}
	cmd, exe, err := m.cfg.Mounter.unprivilegedCommand(command, []*os.File{lf}, "--listen-fd="+strconv.Itoa(protocol.ListenFD))
	if err != nil {
		os.Remove(socket)
		return nil, err
	}
	defer exe.Close()
	cmd.Stderr = logFile
	cmd.SysProcAttr.Setsid = true
	if err := cmd.Start(); err != nil {
		os.Remove(socket)
		return nil, fmt.Errorf("start mounter: %w", err)
	}
	p := &mounterProc{volume: rec.ID, socket: socket, logPath: logPath, pid: cmd.Process.Pid, cmd: cmd, gone: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		why := "exited"
		if err != nil {
			why = err.Error()
		}
		p.ended(fmt.Sprintf("the mounter (pid %d) %s; see %s", p.pid, why, logPath))
	}()
	if err := p.watch(); err != nil {
		p.kill()
		return nil, err
	}
	klog.InfoS("started mounter", "volume", rec.ID, "pid", p.pid, "socket", socket, "uid", cmd.SysProcAttr.Credential.Uid)
	return p, nil
}

// kill ends the mounter at once and removes its socket (or pod).
func (p *mounterProc) kill() {
	if p.pod != nil {
		p.deletePod()
		return
	}
	if p.cmd != nil {
		p.cmd.Process.Kill()
	} else if p.pid > 0 && isMounterPID(p.pid) {
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
	select {
	case <-p.gone:
	case <-time.After(5 * time.Second):
	}
	os.Remove(p.socket)
}

// isMounterPID tells whether pid runs a csi-fat mounter, so that a recorded pid that was reused
// is never killed.
func isMounterPID(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "\x00mounter\x00") && strings.Contains(string(b), "--listen-fd")
}

// mounterOptions is the option string a mounter serves with: the owner, group and masks this
// process would default to (the mounter runs as another user with its own umask), then opts's.
func mounterOptions(optString string) string {
	umask := unix.Umask(0)
	unix.Umask(umask)
	return fmt.Sprintf("uid=%d,gid=%d,umask=%03o,%s", os.Geteuid(), os.Getegid(), umask&0o777, optString)
}

// mounterCode is the gRPC code for a mounter's failure during staging.
func mounterCode(err error) codes.Code {
	var re *protocol.RemoteError
	if errors.As(err, &re) {
		switch re.Code {
		case protocol.CodeNotFAT:
			return codes.FailedPrecondition
		case protocol.CodeInvalid:
			return codes.InvalidArgument
		}
		return codes.Internal
	}
	return codes.FailedPrecondition // it died or hung: the medium is suspect
}

// serveInMounter stages a volume in a mounter of its own: this process claims and opens the
// device, the mounter checks (and repairs) it, this process mounts /dev/fuse at the staging
// path with the options the check leaves, and hands the device and the FUSE descriptor to the
// mounter, which serves them. This process then closes its copies: a FUSE descriptor nobody
// serves would make applications hang instead of fail.
func (m *Manager) serveInMounter(rec volume.Record, devPath string, st *volume.StageRecord) (*servedVolume, error) {
	optString, err := mountOptionString(st.MountFlags, st.MountGroup, st.ReadOnly)
	if err != nil {
		return nil, invalid("%v", err)
	}
	opts, err := mountopt.ParseOptions(optString)
	if err != nil {
		return nil, invalid("%v", err)
	}
	dev, err := m.stagingOpener(rec, devPath)(stagingClaim(opts.ReadOnly))
	if err != nil {
		return nil, status.Errorf(claimCode(err, codes.Internal), "volume %s: open %s: %v", rec.ID, devPath, err)
	}
	defer dev.Close()
	p, err := m.startMounter(rec)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", rec.ID, err)
	}
	fail := func(code codes.Code, format string, args ...any) (*servedVolume, error) {
		p.kill()
		return nil, status.Errorf(code, format, args...)
	}
	devFD := int(dev.OSFile().Fd())
	resp, err := p.call(&protocol.Request{Op: protocol.OpCheck, Check: &protocol.CheckArgs{Repair: repairs(rec, st.ReadOnly), Partition: rec.Partition}}, m.cfg.Mounter.checkTimeout(), devFD)
	if err != nil {
		var re *protocol.RemoteError
		if !errors.As(err, &re) {
			// It died or hung: the medium made the checker crash or loop.
			if !p.settle() {
				p.kill()
			}
			err = fmt.Errorf("%v (%s)", err, p.endedWhy())
		}
		return fail(mounterCode(err), "volume %s: checking the file system on %s: %v", rec.ID, devPath, err)
	}
	forceReadOnly, damage, err := judgeCheck(rec, resp.Check, st.ReadOnly)
	if err != nil {
		p.kill()
		return nil, err
	}
	if forceReadOnly && !opts.ReadOnly {
		optString += ",ro"
		if opts, err = mountopt.ParseOptions(optString); err != nil {
			return fail(codes.InvalidArgument, "%v", err)
		}
	}
	fuseFile, err := hostmount.MountFUSE(devPath, st.Path, opts)
	if err != nil {
		return fail(codes.Internal, "volume %s: %v", rec.ID, err)
	}
	args := &protocol.ServeArgs{
		Options: mounterOptions(optString), Mode: rec.Params.Mode, CacheBytes: rec.Params.CacheBytes, Source: devPath, Mountpoint: st.Path,
		Damage: damage, Checked: true, Partition: rec.Partition,
	}
	fds := []int{devFD, int(fuseFile.Fd())}
	// The mounter may not open the device: it gets the twin for direct reads and writes from
	// here (for reads alone when the volume is served read-only).
	if twin, err := blockdev.OpenDirectTwin(dev.OSFile(), !opts.ReadOnly); err == nil {
		defer twin.Close()
		args.Direct = true
		fds = append(fds, int(twin.Fd()))
	} else {
		klog.V(2).InfoS("large reads and writes go through the page cache", "volume", rec.ID, "reason", err)
	}
	_, err = p.call(&protocol.Request{Op: protocol.OpServe, Serve: args}, serveTimeout, fds...)
	fuseFile.Close()
	if err != nil {
		unix.Unmount(st.Path, unix.MNT_DETACH)
		var re *protocol.RemoteError
		if !errors.As(err, &re) && p.settle() {
			err = fmt.Errorf("%v (%s)", err, p.endedWhy())
		}
		return fail(mounterCode(err), "volume %s: serve at %s: %v", rec.ID, st.Path, err)
	}
	// The session is up (the mounter answers once the kernel's INIT is answered, which would
	// have lowered it again): the read-ahead the unprivileged mounter cannot raise, the plugin
	// raises, without a request to the mount.
	if err := mountopt.RaiseReadahead(st.Path, mountopt.ReadaheadKB); err != nil {
		klog.V(2).InfoS("the mount's read-ahead stays at the kernel's default", "volume", rec.ID, "reason", err)
	}
	st.Mounter = p.record()
	return &servedVolume{id: rec.ID, path: st.Path, remote: p, damage: damage}, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// status asks the mounter for its volume's state.
func (p *mounterProc) status(files bool) (*protocol.Status, error) {
	if p.isGone() {
		return nil, errors.New(p.endedWhy())
	}
	resp, err := p.call(&protocol.Request{Op: protocol.OpStatus, Files: files}, callTimeout)
	if err != nil {
		return nil, err
	}
	if resp.Status == nil {
		return nil, errors.New("mounter answered status without one")
	}
	return resp.Status, nil
}

// sync asks the mounter to write everything back.
func (p *mounterProc) sync() error {
	if p.isGone() {
		return errors.New(p.endedWhy())
	}
	_, err := p.call(&protocol.Request{Op: protocol.OpSync}, serveTimeout)
	return err
}

// stopRemote unstages a mounter's volume: write back, unmount (refused while busy: the
// mounter serves on), let the mounter close the volume and exit, and remove its socket.
func (sv *servedVolume) stopRemote() error {
	p := sv.remote
	if p.isGone() {
		// Nothing serves the mount: what was fsync'ed is on the device; take the dead mount away.
		if err := hostmount.NewTable().DetachAll(sv.path); err != nil {
			return err
		}
		p.remove()
		return nil
	}
	if err := p.sync(); err != nil {
		klog.ErrorS(err, "writing back before unmounting", "volume", p.volume)
	}
	if err := unix.Unmount(sv.path, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return &os.PathError{Op: "unmount", Path: sv.path, Err: err}
	}
	_, err := p.call(&protocol.Request{Op: protocol.OpStop}, 2*unmountWait)
	select {
	case <-p.gone:
	case <-time.After(unmountWait):
		klog.InfoS("mounter did not exit after stop; killing it", "volume", p.volume, "mounter", p.String())
		p.kill()
	}
	if err != nil && !protocol.IsEOF(err) {
		os.Remove(p.socket)
		return fmt.Errorf("mounter of %s: %w", p.volume, err)
	}
	p.remove()
	klog.InfoS("mounter stopped", "volume", p.volume, "mounter", p.String())
	return nil
}

// discard ends a short-lived mounter and removes what is left of it.
func (p *mounterProc) discard() {
	p.kill()
	if p.pod == nil {
		os.Remove(p.logPath)
	}
}

// remove takes away what is left of a mounter that ended: its socket and log, or its pod.
func (p *mounterProc) remove() {
	if p.pod != nil {
		p.deletePod()
		return
	}
	os.Remove(p.socket)
	os.Remove(p.logPath)
}

// adoptMounter takes over the mounter an earlier plugin process started for a staged volume,
// if it is alive and serving at the staging path.
func (m *Manager) adoptMounter(rec volume.Record, st *volume.StageRecord) (*servedVolume, error) {
	p := m.recordedMounter(st.Mounter, rec.ID)
	if p.pod != nil && p.podCfg == nil {
		return nil, fmt.Errorf("the mounter is pod %s, and this plugin has no API client (--mounter)", p.pod)
	}
	s, err := p.status(false)
	if err != nil {
		return nil, err
	}
	if !s.Serving || filepath.Clean(s.Mountpoint) != st.Path || s.Volume != rec.ID {
		return nil, fmt.Errorf("mounter %s serves %q at %q (serving=%v), not %s at %s", p, s.Volume, s.Mountpoint, s.Serving, rec.ID, st.Path)
	}
	if err := hostmount.Healthy(st.Path); err != nil {
		return nil, err
	}
	p.pid = s.PID
	if err := p.watch(); err != nil {
		return nil, err
	}
	klog.InfoS("adopted mounter", "volume", rec.ID, "mounter", p.String(), "path", st.Path)
	return &servedVolume{id: rec.ID, path: st.Path, remote: p, damage: s.CheckDamage}, nil
}

// dropMounter ends a recorded mounter that cannot be adopted: it is told to stop, or killed.
func (m *Manager) dropMounter(r *volume.MounterRecord, volume string) {
	p := m.recordedMounter(r, volume)
	_, err := p.call(&protocol.Request{Op: protocol.OpStop}, time.Second)
	switch {
	case p.pod != nil:
		if p.podCfg != nil {
			p.deletePod()
		}
		return
	case err != nil && isMounterPID(r.PID):
		syscall.Kill(r.PID, syscall.SIGKILL)
	}
	os.Remove(r.Socket)
}

// removeOrphanMounters stops every mounter whose socket no staged volume's record names (left
// by a crash between starting it and recording it, or by a record dropped since): its mount is
// unmounted unless a staged volume lives there, and the mounter told to stop (killed if it does
// not answer).
func (m *Manager) removeOrphanMounters() {
	dir := filepath.Join(m.cfg.StateDir, mountersDir)
	socks, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
	m.mu.Lock()
	known := map[string]bool{}
	staging := map[string]bool{}
	for _, st := range m.state.Staged {
		staging[st.Path] = true
		if st.Mounter != nil {
			known[st.Mounter.Socket] = true
		}
	}
	m.mu.Unlock()
	for _, sock := range socks {
		if known[sock] {
			continue
		}
		p := &mounterProc{socket: sock, gone: make(chan struct{})}
		if !m.stopOrphan(p, staging) {
			klog.InfoS("removing the socket of a mounter that is gone", "socket", sock)
		}
		os.Remove(sock)
	}
	if m.cfg.Mounter.Pod != nil {
		m.removeOrphanMounterPods()
	}
}

// stopOrphan stops a mounter no staged volume's record names: its mount is unmounted unless a
// staged volume lives there, and it is told to stop (a process is killed if it does not answer).
// It tells whether the mounter answered.
func (m *Manager) stopOrphan(p *mounterProc, staging map[string]bool) bool {
	s, err := p.status(false)
	if err != nil {
		return false
	}
	klog.InfoS("removing an orphaned mounter", "mounter", p.String(), "pid", s.PID, "volume", s.Volume, "mountpoint", s.Mountpoint)
	if s.Mountpoint != "" && !staging[filepath.Clean(s.Mountpoint)] {
		if err := m.mounts.DetachAll(s.Mountpoint); err != nil {
			klog.ErrorS(err, "unmounting an orphaned mounter's mount", "path", s.Mountpoint)
		}
	}
	if _, err := p.call(&protocol.Request{Op: protocol.OpStop}, 2*unmountWait); err != nil && p.pod == nil && isMounterPID(s.PID) {
		syscall.Kill(s.PID, syscall.SIGKILL)
	}
	return true
}

// checkAdoptable checks a USB device's file system before a volume adopts it: in a mounter
// process of its own in process mode, so that the plugin never parses a medium's structures;
// else in this process. partition names the partition to check ("": the whole
// device, or its first FAT partition). It returns the volume's label.
func (m *Manager) checkAdoptable(d media.Device, partition string) (string, error) {
	dev, err := blockdev.OpenClaimed(d.Path, blockdev.ExclusiveReadOnly)
	if errors.Is(err, blockdev.ErrInUse) && partition != "" && m.stagedOn(d.ID) {
		// A volume on another partition of the stick is staged and holds it O_EXCL, which keeps
		// the host's mounts and other claims off every partition: this one is read beside it,
		// without a claim of its own (the staged volume writes only inside its partition).
		dev, err = blockdev.OpenClaimed(d.Path, blockdev.Shared)
	}
	if err != nil {
		return "", err
	}
	defer dev.Close()
	var res *protocol.CheckResult
	if m.cfg.Mounter.process() {
		res, err = m.checkInMounter("usb-adopt:"+d.ID, dev.OSFile(), protocol.CheckArgs{Walk: true, Partition: partition})
	} else {
		res, err = m.cfg.InProcess.Check(dev, partition, false, true)
	}
	if err != nil {
		return "", fmt.Errorf("check %s: %w", d.Path, err)
	}
	if !res.Clean {
		return "", fmt.Errorf("check %s: the file system needs repair: %s", d.Path, listProblems(res.Left, res.Total))
	}
	return res.Label, nil
}
