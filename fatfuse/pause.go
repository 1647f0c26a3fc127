package fatfuse

import (
	"fmt"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// gate lets requests into the server until a pause; those that come later wait for ever,
// unanswered, and the kernel sends them again to the next server (FUSE_NOTIFY_RESEND).
type gate struct {
	mu      sync.RWMutex
	closed  bool
	running sync.WaitGroup
	paused  chan struct{} // closed once paused: Wait returns
}

func newGate() gate { return gate{paused: make(chan struct{})} }

// enter lets a request in and returns what it calls when done; after a pause it never returns.
// It counts the requests the kernel sent again (h is nil for FORGET, which it never resends).
func (s *Server) enter(h *fuse.InHeader) (leave func()) {
	if h != nil && resent(h) {
		s.resent.Add(1)
	}
	g := &s.gate
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		select {} // left to the next server
	}
	g.running.Add(1)
	g.mu.RUnlock()
	return g.running.Done
}

// Pause hands the connection over: no request starts after it, those in progress finish, the
// volume is written back and the state is left complete, marked as a planned hand-over (the next
// server need not invalidate the kernel's caches nor report lost writes). Wait returns
// afterwards; the connection stays alive for the next server. Requests read from then on are
// left unanswered: the process must end (or at least stop reading the descriptor) before the
// next server takes over, whose FUSE_NOTIFY_RESEND brings them back. The volume is the next
// server's: do not close it (its close writes), end the process instead.
func (s *Server) Pause() error {
	g := &s.gate
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return fmt.Errorf("pause %s: paused already", s.mountpoint)
	}
	g.closed = true
	g.mu.Unlock()
	g.running.Wait()
	defer close(g.paused)
	s.settle()
	if err := s.vol.Sync(); err != nil {
		return fmt.Errorf("pause %s: writing the volume back: %w", s.mountpoint, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.handles {
		h.dirty = false // all on the medium now
	}
	if s.state == nil {
		return nil
	}
	if err := s.compactLocked(true); err != nil {
		return fmt.Errorf("pause %s: %w", s.mountpoint, err)
	}
	s.state = nil // the next server's from now on
	return nil
}
