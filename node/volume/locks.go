package volume

import "sync"

// Locks holds one lock per volume name. Operations do not queue behind each other: the CO
// retries, and a second call for a volume while one is running is answered with Aborted, as the
// CSI spec asks.
type Locks struct {
	mu    sync.Mutex
	names map[string]string // volume name -> the operation holding it
}

func NewLocks() *Locks { return &Locks{names: map[string]string{}} }

// tryLock takes the volume's lock for op; when another operation holds it, it returns false
// and that operation's name.
func (f *Locks) TryLock(name, op string) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if holder, busy := f.names[name]; busy {
		return false, holder
	}
	f.names[name] = op
	return true, ""
}

func (f *Locks) Unlock(name string) {
	f.mu.Lock()
	delete(f.names, name)
	f.mu.Unlock()
}
