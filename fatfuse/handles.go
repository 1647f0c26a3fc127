package fatfuse

import (
	"sync"
	"syscall"

	"github.com/csi-fat/csi-fat/fatvol"
)

// handle is an open file or directory: the number the kernel was given at OPEN, CREATE or
// OPENDIR names it until RELEASE. The table is the server's own and is kept in the state file,
// so a server taking the connection over knows the handles the kernel holds.
type handle struct {
	srv   *Server
	fh    uint64
	n     *node
	flags uint32 // open(2) flags
	dir   bool

	mu sync.Mutex // guards f and the listing
	// f is the engine's file; nil on a handle a previous server opened, until its first use.
	f    *fatvol.File
	list listing // a directory's entries (readdir.go)

	// Guarded by srv.mu.
	// dirty: written since the last sync of the volume that covered its writes, so a crash may
	// lose what it wrote.
	dirty bool
	// writes counts the writes started on the handle, writing those under way: a sync clears
	// the mark only of handles whose writes had all ended before it began (syncVolume).
	writes  uint64
	writing int
	// lostWrites: taken over after a crash that may have lost acknowledged writes of this
	// handle; its next write, fsync or flush fails with EIO, once.
	lostWrites bool
}

// addHandle enters an open engine file (nil: opened on first use) into the table.
func (s *Server) addHandle(n *node, f *fatvol.File, flags uint32, dir bool) *handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextFh++
	h := &handle{srv: s, fh: s.nextFh, n: n, flags: flags, dir: dir, f: f}
	s.handles[h.fh] = h
	s.saveHandleLocked(h)
	return h
}

// handle resolves the file handle the kernel sent for node id; nil when it names none.
func (s *Server) handle(id, fh uint64) *handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handles[fh]
	if h == nil || h.n.ino != id {
		return nil
	}
	return h
}

// dropHandle takes fh out of the table and returns it (nil if unknown).
func (s *Server) dropHandle(fh uint64) *handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handles[fh]
	if h != nil {
		delete(s.handles, fh)
		s.saveReleasedLocked(fh)
	}
	return h
}

// file returns the handle's engine file, opening it again when a previous server opened it.
func (h *handle) file() (*fatvol.File, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f != nil {
		return h.f, 0
	}
	f, e := h.n.opened(openFlags(h.flags))
	if e != 0 {
		return nil, e
	}
	h.f = f
	return f, 0
}

// close closes the engine's file, if it was opened.
func (h *handle) close() error {
	h.mu.Lock()
	f := h.f
	h.f = nil
	h.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.Close()
}

// writeStarts marks the handle dirty in the state before a write is acknowledged; the write
// calls the function it returns once it has reached the engine.
func (h *handle) writeStarts() (ended func()) {
	s := h.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	h.writes++
	h.writing++
	if !h.dirty {
		h.dirty = true
		s.saveHandleLocked(h)
	}
	return func() {
		s.mu.Lock()
		h.writing--
		s.mu.Unlock()
	}
}

// syncVolume runs sync, which writes the whole volume back (the engine's Sync, whichever file or
// directory it is asked through), and then marks clean every handle whose writes had all reached
// the engine before it began, so that a crash reports lost writes only for handles whose
// writes the medium may lack, not for one synced through another descriptor (`sync FILE`
// opens one) or by a directory's fsync.
func (s *Server) syncVolume(sync func() error) error {
	s.mu.Lock()
	covered := map[*handle]uint64{}
	for _, h := range s.handles {
		if h.dirty && h.writing == 0 {
			covered[h] = h.writes
		}
	}
	s.mu.Unlock()
	if err := sync(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, writes := range covered {
		// A handle released meanwhile is out of the table and the state: not recorded again.
		if h.dirty && h.writes == writes && s.handles[h.fh] == h {
			h.dirty = false
			s.saveHandleLocked(h)
		}
	}
	return nil
}

// takeLostWrites reports, once, that a crash may have lost writes this handle had acknowledged.
func (h *handle) takeLostWrites() bool {
	s := h.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.lostWrites {
		return false
	}
	h.lostWrites, h.dirty = false, false
	s.saveHandleLocked(h)
	return true
}
