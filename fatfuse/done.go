package fatfuse

// A RENAME the kernel sends again after a takeover cannot always be told done by its effect: an
// exchange applied twice swaps back. The server records the unique number of each rename it
// applied, before it answers, and keeps the last doneKept of them (the dead server had read at
// most a few dozen requests it had not answered); a rename resent with one of them is answered
// without being applied again.

// doneKept bounds the applied renames remembered.
const doneKept = 64

// appliedLocked records that the request with unique number u was applied; the caller holds s.mu.
func (s *Server) appliedLocked(u uint64) {
	u &^= resendBit
	if len(s.done) == doneKept {
		s.done = s.done[1:]
	}
	s.done = append(s.done, u)
	if s.state != nil {
		s.appendLocked(idRecord(recDone, u))
	}
}

// wasApplied tells whether the request with unique number u was applied already.
func (s *Server) wasApplied(u uint64) bool {
	u &^= resendBit
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.done {
		if d == u {
			return true
		}
	}
	return false
}
