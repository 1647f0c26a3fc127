package mounters

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/volume"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Mounter is a mounter serving one volume, started by this process or adopted from an
// earlier one: a process of this host's, or a pod.
type Mounter struct {
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
	// dead is closed as soon as the mounter is seen to end (its control connection ended), which
	// may be before how it ended is known (gone); made on demand.
	dead   chan struct{}
	isDead bool
	// build is its version (OpBuild), once buildKnown.
	build      string
	buildKnown bool
}

func (p *Mounter) Record() *volume.MounterRecord {
	r := &volume.MounterRecord{PID: p.pid, Socket: p.socket, Log: p.logPath}
	if p.pod != nil {
		r.Namespace, r.Pod, r.PodUID = p.pod.namespace, p.pod.name, string(p.pod.uid)
	}
	return r
}

// String names the mounter in logs and conditions.
func (p *Mounter) String() string {
	if p.pod != nil {
		return "pod " + p.pod.String()
	}
	return fmt.Sprintf("pid %d", p.pid)
}

// recordedMounter is the mounter a record names.
func (l *Launcher) Recorded(r *volume.MounterRecord, volume string) *Mounter {
	p := &Mounter{volume: volume, socket: r.Socket, logPath: r.Log, pid: r.PID, gone: make(chan struct{})}
	if r.PodUID != "" {
		p.pod = &podRef{namespace: r.Namespace, name: r.Pod, uid: types.UID(r.PodUID)}
		p.podCfg = l.cfg.Pod
	}
	return p
}

func (p *Mounter) ended(why string) {
	p.goneOnce.Do(func() {
		p.mu.Lock()
		p.why = why
		p.mu.Unlock()
		close(p.gone)
	})
	p.markDead()
}

// markDead records that the mounter is seen to end.
func (p *Mounter) markDead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.isDead {
		p.isDead = true
		if p.dead != nil {
			close(p.dead)
		}
	}
}

// Dead is closed as soon as the mounter is seen to end, which for a pod comes before its
// status says how (Gone): a takeover need not wait for that.
func (p *Mounter) Dead() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead == nil {
		p.dead = make(chan struct{})
		if p.isDead {
			close(p.dead)
		}
	}
	return p.dead
}

func (p *Mounter) IsGone() bool {
	select {
	case <-p.gone:
		return true
	default:
		return false
	}
}

// settle waits a moment for a mounter whose connection failed to be seen gone, so that what
// is reported names how it ended; it tells whether it is gone.
func (p *Mounter) Settle() bool {
	select {
	case <-p.gone:
		return true
	case <-time.After(3 * time.Second):
		return false
	}
}

// endedWhy says how the mounter ended.
func (p *Mounter) EndedWhy() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.why
}

// call sends one request and waits for the answer.
func (p *Mounter) Call(req *protocol.Request, timeout time.Duration, fds ...int) (*protocol.Response, error) {
	c, err := dial(p.socket, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	req.Volume = p.volume
	return protocol.Call(c, req, timeout, fds...)
}

// watch holds a connection on which the mounter never answers: its end is the mounter's.
func (p *Mounter) watch() error {
	c, err := dial(p.socket, CallTimeout)
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
		p.markDead()
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

// kill ends the mounter at once and removes its socket (or pod).
func (p *Mounter) Kill() {
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

// status asks the mounter for its volume's state.
func (p *Mounter) Status(files bool) (*protocol.Status, error) {
	if p.IsGone() {
		return nil, errors.New(p.EndedWhy())
	}
	resp, err := p.Call(&protocol.Request{Op: protocol.OpStatus, Files: files}, CallTimeout)
	if err != nil {
		return nil, err
	}
	if resp.Status == nil {
		return nil, errors.New("mounter answered status without one")
	}
	return resp.Status, nil
}

// sync asks the mounter to write everything back.
func (p *Mounter) Sync() error {
	if p.IsGone() {
		return errors.New(p.EndedWhy())
	}
	_, err := p.Call(&protocol.Request{Op: protocol.OpSync}, ServeTimeout)
	return err
}

// stopWait bounds how long a mounter told to stop may take to exit.
const stopWait = 10 * time.Second

// Stop unstages the mounter's volume, mounted at mountpoint: write back, unmount (refused while
// busy: the mounter serves on), let the mounter close the volume and exit, and remove its socket.
func (p *Mounter) Stop(mountpoint string) error {
	if p.IsGone() {
		// Nothing serves the mount: what was fsync'ed is on the device; take the dead mount away.
		if err := hostmount.NewTable().DetachAll(mountpoint); err != nil {
			return err
		}
		p.Remove()
		return nil
	}
	if err := p.Sync(); err != nil {
		klog.ErrorS(err, "writing back before unmounting", "volume", p.volume)
	}
	if err := unix.Unmount(mountpoint, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return &os.PathError{Op: "unmount", Path: mountpoint, Err: err}
	}
	_, err := p.Call(&protocol.Request{Op: protocol.OpStop}, 2*stopWait)
	select {
	case <-p.gone:
	case <-time.After(stopWait):
		klog.InfoS("mounter did not exit after stop; killing it", "volume", p.volume, "mounter", p.String())
		p.Kill()
	}
	if err != nil && !protocol.IsEOF(err) {
		os.Remove(p.socket)
		return fmt.Errorf("mounter of %s: %w", p.volume, err)
	}
	p.Remove()
	klog.InfoS("mounter stopped", "volume", p.volume, "mounter", p.String())
	return nil
}

// discard ends a short-lived mounter and removes what is left of it.
func (p *Mounter) Discard() {
	p.Kill()
	if p.pod == nil {
		os.Remove(p.logPath)
	}
}

// remove takes away what is left of a mounter that ended: its socket and log, or its pod.
func (p *Mounter) Remove() {
	if p.pod != nil {
		p.deletePod()
		return
	}
	os.Remove(p.socket)
	os.Remove(p.logPath)
}

// Memory asks the mounter for its memory against its bound. A mounter older than the operation
// answers it as unknown: nil, with no error.
func (p *Mounter) Memory() (*protocol.Memory, error) {
	if p.IsGone() {
		return nil, errors.New(p.EndedWhy())
	}
	resp, err := p.Call(&protocol.Request{Op: protocol.OpMemory}, CallTimeout)
	var re *protocol.RemoteError
	if errors.As(err, &re) && re.Code == protocol.CodeInvalid {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return resp.Memory, nil
}
