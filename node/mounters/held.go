package mounters

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// Held are the plugin's own copies of what a mounter serves a volume on: while the plugin holds
// the FUSE descriptor, the kernel keeps the connection when the mounter ends, and a new mounter
// takes it over from the state descriptor. The plugin makes the state descriptor and hands it
// on; it never reads it.
type Held struct {
	FUSE   *os.File
	Device *os.File
	Direct *os.File // the device's O_DIRECT twin; nil when there is none
	State  *os.File // a memfd the FUSE server keeps its takeover state in
}

// NewState makes the state descriptor of a volume's connection: an anonymous memory file,
// which lives as long as a descriptor of it does.
func NewState(volume string) (*os.File, error) {
	fd, err := unix.MemfdCreate("csi-fat-state", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("volume %s: make the FUSE state descriptor: %w", volume, err)
	}
	return os.NewFile(uintptr(fd), "fuse-state:"+volume), nil
}

// Dup copies f into a descriptor of this process's own (close-on-exec).
func Dup(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate %s: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// FDs are the descriptors as OpServe carries them: device, FUSE, then the twin and the state.
func (h *Held) FDs() []int {
	fds := []int{int(h.Device.Fd()), int(h.FUSE.Fd())}
	if h.Direct != nil {
		fds = append(fds, int(h.Direct.Fd()))
	}
	return append(fds, int(h.State.Fd()))
}

// Close lets go of the copies: once no mounter holds the FUSE descriptor either, the kernel
// ends the connection.
func (h *Held) Close() {
	if h == nil {
		return
	}
	for _, f := range []*os.File{h.FUSE, h.Device, h.Direct, h.State} {
		if f != nil {
			f.Close()
		}
	}
}

// ErrNotHeld is a mounter that cannot give its descriptors back: one older than the operation,
// or one serving without a state descriptor, which no other mounter could take over from.
var ErrNotHeld = errors.New("the mounter cannot hand its connection on")

// Descriptors asks the mounter for copies of what it serves on (after a restart of the plugin,
// which lost its own).
func (p *Mounter) Descriptors() (*Held, error) {
	c, err := dial(p.socket, CallTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	resp, files, err := protocol.CallFiles(c, &protocol.Request{Op: protocol.OpDescriptors, Volume: p.volume}, CallTimeout)
	var re *protocol.RemoteError
	if errors.As(err, &re) && re.Code == protocol.CodeInvalid {
		return nil, fmt.Errorf("%w: %v", ErrNotHeld, err)
	}
	if err != nil {
		return nil, fmt.Errorf("descriptors of volume %s from its mounter (%s): %w", p.volume, p, err)
	}
	h := &Held{FUSE: files[0], Device: files[1]}
	files = files[2:]
	if resp.Descriptors.Direct {
		h.Direct, files = files[0], files[1:]
	}
	if resp.Descriptors.State {
		h.State = files[0]
	}
	if h.State == nil {
		h.Close()
		return nil, fmt.Errorf("%w: it serves volume %s without a state descriptor", ErrNotHeld, p.volume)
	}
	return h, nil
}

// Build asks the mounter's version, once; "" for a mounter older than the operation.
func (p *Mounter) Build() (string, error) {
	p.mu.Lock()
	known, v := p.buildKnown, p.build
	p.mu.Unlock()
	if known {
		return v, nil
	}
	resp, err := p.Call(&protocol.Request{Op: protocol.OpBuild}, CallTimeout)
	var re *protocol.RemoteError
	switch {
	case errors.As(err, &re) && re.Code == protocol.CodeInvalid:
		v = ""
	case err != nil:
		return "", err
	default:
		v = resp.Build
	}
	p.mu.Lock()
	p.build, p.buildKnown = v, true
	p.mu.Unlock()
	return v, nil
}

// HandOver has the mounter stop serving, write everything back and exit, leaving its live
// connection to the plugin's copy for the next mounter; it returns once the mounter is gone.
func (p *Mounter) HandOver() error {
	if _, err := p.Call(&protocol.Request{Op: protocol.OpHandOver}, ServeTimeout); err != nil {
		return fmt.Errorf("hand-over of volume %s by its mounter (%s): %w", p.volume, p, err)
	}
	select {
	case <-p.gone:
	case <-time.After(stopWait):
		p.Kill()
	}
	return nil
}

// Gone is closed once the mounter is gone.
func (p *Mounter) Gone() <-chan struct{} { return p.gone }

// Retire takes away what is left of a mounter whose connection another took over: its socket
// (a process's log goes on, shared with the next), or its pod.
func (p *Mounter) Retire() {
	if p.pod != nil {
		p.deletePod()
		return
	}
	os.Remove(p.socket)
}
