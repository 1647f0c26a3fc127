package fatfuse

import (
	"log"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The kernel keeps every inode it looked up for as long as it has memory to spare, and the
// server holds a node for each until the kernel forgets it: a walk of a
// volume of many files would make the server's memory follow the file count. With a node budget
// the server asks the kernel, past it, to forget what it has not used lately
// (FUSE_NOTIFY_PRUNE, FUSE 7.45): the kernel drops only dentries that nothing holds, so open
// files, working directories and mount points stay, and its FORGETs free the nodes. A node looked
// up again is made anew with the same inode number (its entry's position), so the file is the
// same file to the kernel and to applications.

// Eviction pace.
const (
	pruneBatch  = 1024                  // node IDs per notification
	pruneSettle = 50 * time.Millisecond // for the kernel's FORGETs after a notification
	pruneRest   = time.Second           // before trying again when nothing could be dropped
)

// SetNodeBudget bounds the nodes the server holds to about n (0: no bound): past n it asks the
// kernel to forget nodes not used since the last look, down to nine tenths of n. Call it once,
// after Mount or ServeFD. A kernel without FUSE_NOTIFY_PRUNE leaves the nodes unbounded (logged).
func (s *Server) SetNodeBudget(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.budget = n
	s.prune = make(chan struct{}, 1)
	s.mu.Unlock()
	ended := make(chan struct{})
	go func() {
		s.Wait()
		close(ended)
	}()
	go s.pruneLoop(ended)
}

// overBudgetLocked wakes the pruner when the nodes exceed the budget; the caller holds s.mu.
func (s *Server) overBudgetLocked() {
	if s.budget > 0 && len(s.byIno) > s.budget {
		select {
		case s.prune <- struct{}{}:
		default:
		}
	}
}

// pruneLoop runs until the session ends: each wake-up prunes until the nodes are below the low
// mark or nothing more can go.
func (s *Server) pruneLoop(ended <-chan struct{}) {
	for {
		select {
		case <-s.prune:
		case <-ended:
			return
		}
		for s.pruneOnce(ended) {
		}
	}
}

// pruneOnce asks the kernel to forget one round of unused nodes and tells whether to go on.
func (s *Server) pruneOnce(ended <-chan struct{}) bool {
	s.mu.Lock()
	low := s.budget - s.budget/10
	excess := len(s.byIno) - low
	if excess <= 0 {
		s.mu.Unlock()
		return false
	}
	var victims []uint64
	for _, n := range s.byIno {
		if len(victims) == excess {
			break
		}
		if n == s.root || n.anchor != nil || n.lookups == 0 || n.used.Swap(false) {
			// The root; a removed file still open; a node the kernel does not hold, which only
			// a readdir made; or used since the last look.
			continue
		}
		victims = append(victims, n.ino)
	}
	before := len(s.byIno)
	s.mu.Unlock()
	if len(victims) == 0 {
		return s.rest(ended) // every node was used lately: look again later
	}
	for len(victims) > 0 {
		batch := victims[:min(len(victims), pruneBatch)]
		victims = victims[len(batch):]
		if st := s.fuse.PruneNotify(batch); !st.Ok() {
			if st == fuse.ENOSYS {
				log.Printf("fatfuse: %s: the kernel cannot be asked to forget inodes (FUSE_NOTIFY_PRUNE): the server's nodes stay unbounded", s.mountpoint)
				s.mu.Lock()
				s.budget = 0
				s.mu.Unlock()
				return false
			}
			return s.rest(ended)
		}
	}
	time.Sleep(pruneSettle)
	s.mu.Lock()
	after := len(s.byIno)
	s.mu.Unlock()
	if after >= before {
		return s.rest(ended) // nothing went: what is left is in use
	}
	return true
}

// rest waits a while before another round, or until the session ends; it tells whether to go on.
func (s *Server) rest(ended <-chan struct{}) bool {
	select {
	case <-time.After(pruneRest):
		return true
	case <-ended:
		return false
	}
}
