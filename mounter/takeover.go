package mounter

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// Version is this mounter's build, which OpBuild answers; the csi-fat command sets it to the
// driver's.
var Version = "dev"

// buildVersion is Version, or the test hook's stand-in (protocol.VersionEnv).
func buildVersion() string {
	if v := os.Getenv(protocol.VersionEnv); v != "" {
		return v
	}
	return Version
}

// heldFiles are the mounter's own copies of what it serves on: the FUSE descriptor, the device,
// its O_DIRECT twin and the state descriptor (the last two may be nil).
type heldFiles struct {
	fuse, dev, direct, state *os.File
}

// copies duplicates what serve was handed, so that the server and the engine can own theirs.
func copies(fuse, dev, direct, state *os.File) (heldFiles, error) {
	var h heldFiles
	for _, c := range []struct {
		from *os.File
		to   **os.File
	}{{fuse, &h.fuse}, {dev, &h.dev}, {direct, &h.direct}, {state, &h.state}} {
		if c.from == nil {
			continue
		}
		fd, err := unix.FcntlInt(c.from.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			h.close()
			return heldFiles{}, fmt.Errorf("duplicate %s: %w", c.from.Name(), err)
		}
		*c.to = os.NewFile(uintptr(fd), c.from.Name())
	}
	return h, nil
}

func (h *heldFiles) close() {
	for _, f := range []**os.File{&h.fuse, &h.dev, &h.direct, &h.state} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
}

// sendDescriptors answers OpDescriptors on c: copies of what the mounter serves on go to the
// plugin, which holds them so that the connection outlives this process. The mounter keeps its
// own.
func (s *Server) sendDescriptors(c *net.UnixConn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held
	if !s.served || closed(s.done) || h.fuse == nil {
		return protocol.Send(c, &protocol.Response{Version: protocol.Version, Error: "no volume is served", Code: protocol.CodeInvalid})
	}
	d := &protocol.Descriptors{Direct: h.direct != nil, State: h.state != nil}
	fds := []int{int(h.fuse.Fd()), int(h.dev.Fd())}
	if h.direct != nil {
		fds = append(fds, int(h.direct.Fd()))
	}
	if h.state != nil {
		fds = append(fds, int(h.state.Fd()))
	}
	return protocol.Send(c, &protocol.Response{Version: protocol.Version, Descriptors: d}, fds...)
}

// handOverWait bounds how long a hand-over waits for the paused session to write back and end.
const handOverWait = time.Minute

// handOver ends a planned hand-over: the server stops (answering what it read, writing back,
// completing the state), and the mounter answers and exits, leaving the live connection to the
// plugin's copy and the volume, as it stands, to the next mounter (which checks it first).
func (s *Server) handOver() *protocol.Response {
	s.mu.Lock()
	srv, done, state := s.srv, s.done, s.held.state
	if srv == nil || closed(done) {
		s.mu.Unlock()
		return fail(errors.New("no volume is served"), protocol.CodeInvalid)
	}
	if state == nil {
		s.mu.Unlock()
		return fail(errors.New("this volume is served without a state descriptor: no other server can take it over"), protocol.CodeInvalid)
	}
	s.handing = true
	s.mu.Unlock()
	if err := srv.Pause(); err != nil {
		s.mu.Lock()
		s.handing = false
		s.mu.Unlock()
		return fail(fmt.Errorf("pause the FUSE server: %w", err), "")
	}
	select {
	case <-done:
	case <-time.After(handOverWait):
		return fail(fmt.Errorf("the paused session did not end within %v", handOverWait), "")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeErr != nil {
		return fail(fmt.Errorf("write back: %w", s.closeErr), "")
	}
	return &protocol.Response{}
}
