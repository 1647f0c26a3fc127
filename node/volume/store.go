package volume

import (
	"path/filepath"
	"sync"
)

// Store is the node's state in memory and in its file, with the one mutex that guards it: hold
// it (Lock) to read or change the state, and SaveLocked before what a change records is acted
// on. What a caller keeps beside the records and must change with them (node.Manager's served
// volumes) shares the mutex.
type Store struct {
	sync.Mutex
	*State
	path string
}

// OpenStore reads the state kept in dir (a new state when there is none yet).
func OpenStore(dir string) (*Store, error) {
	path := filepath.Join(dir, StateFile)
	st, err := LoadState(path)
	if err != nil {
		return nil, err
	}
	return &Store{State: st, path: path}, nil
}

// SaveLocked writes the state to its file, durably; the caller holds the mutex.
func (s *Store) SaveLocked() error { return s.State.Save(s.path) }

// VolumeRecords copies the records of the node's volumes. It takes the mutex.
func (s *Store) VolumeRecords() []Record {
	return copyOut(s, func() map[string]*Record { return s.Volumes })
}

// StageRecords copies the records of the staged volumes. It takes the mutex.
func (s *Store) StageRecords() []StageRecord {
	return copyOut(s, func() map[string]*StageRecord { return s.Staged })
}

// copyOut copies the records of one of the state's maps under the mutex.
func copyOut[R any](s *Store, records func() map[string]*R) []R {
	s.Lock()
	defer s.Unlock()
	m := records()
	out := make([]R, 0, len(m))
	for _, r := range m {
		out = append(out, *r)
	}
	return out
}
