package blockdev

import (
	"fmt"
	"sync"
	"syscall"
)

// Faulty wraps a Device and injects I/O errors, so tests can drive the engine's error and
// crash paths on a real image. Every injected error wraps syscall.EIO, as a failing disk
// would. Write budgets count write requests (a WritevAt is one) from the moment they are
// armed. Safe for concurrent use.
type Faulty struct {
	Device
	mu sync.Mutex

	failAfter int64 // -1: off; else writes allowed before failing
	stopAfter int64 // -1: off; else writes allowed before the device "vanishes"
	stopped   bool  // the device has vanished: writes and flushes fail
	failRead  bool
	failFlush bool

	writes  int64 // write requests seen since the last arm of a write budget
	dropped int64 // write requests dropped (failed or stopped) since creation
}

var _ Device = (*Faulty)(nil)

// NewFaulty wraps d with no faults armed.
func NewFaulty(d Device) *Faulty {
	return &Faulty{Device: d, failAfter: -1, stopAfter: -1}
}

// FailWritesAfter lets the next n write requests through; the (n+1)th and later write
// requests return an error wrapping syscall.EIO and are not performed. Reads and flushes
// are unaffected: a transient write error the engine must report, not a dead device.
func (f *Faulty) FailWritesAfter(n int) {
	f.mu.Lock()
	f.failAfter = int64(n)
	f.writes = 0
	f.mu.Unlock()
}

// StopAfterWrites lets the next n write requests through, then models a vanished device or
// power cut: every later write is silently dropped and returns EIO, and so does every
// Flush, until Disarm. Reads still reach the device, so a test can inspect what survived
// (or reopen the image to "reboot").
func (f *Faulty) StopAfterWrites(n int) {
	f.mu.Lock()
	f.stopAfter = int64(n)
	f.stopped = false
	f.writes = 0
	f.mu.Unlock()
}

// FailReads makes every read return EIO (true) or pass through (false).
func (f *Faulty) FailReads(on bool) {
	f.mu.Lock()
	f.failRead = on
	f.mu.Unlock()
}

// FailFlush makes every Flush return EIO without flushing (true) or pass through (false).
func (f *Faulty) FailFlush(on bool) {
	f.mu.Lock()
	f.failFlush = on
	f.mu.Unlock()
}

// Disarm clears every armed fault; the device works normally again.
func (f *Faulty) Disarm() {
	f.mu.Lock()
	f.failAfter, f.stopAfter = -1, -1
	f.stopped, f.failRead, f.failFlush = false, false, false
	f.writes = 0
	f.mu.Unlock()
}

// Stopped reports whether StopAfterWrites has tripped.
func (f *Faulty) Stopped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped
}

// Dropped returns how many write requests were refused by injected faults.
func (f *Faulty) Dropped() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropped
}

// admitWrite decides under the lock whether this write request reaches the device.
// The decision and the count are made together so concurrent writers see an exact budget.
func (f *Faulty) admitWrite(off int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	switch {
	case f.stopped:
	case f.stopAfter >= 0 && f.writes > f.stopAfter:
		f.stopped = true
	case f.failAfter >= 0 && f.writes > f.failAfter:
		f.dropped++
		return fmt.Errorf("blockdev: injected write fault at %d (write request %d after arming): %w",
			off, f.writes, syscall.EIO)
	default:
		return nil
	}
	f.dropped++
	return fmt.Errorf("blockdev: injected device stop, write at %d dropped: %w", off, syscall.EIO)
}

// ReadAt reads through unless FailReads is on.
func (f *Faulty) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	fail := f.failRead
	f.mu.Unlock()
	if fail {
		return 0, fmt.Errorf("blockdev: injected read fault at %d: %w", off, syscall.EIO)
	}
	return f.Device.ReadAt(p, off)
}

// WriteAt writes through unless a write fault has been reached.
func (f *Faulty) WriteAt(p []byte, off int64) (int, error) {
	if err := f.admitWrite(off); err != nil {
		return 0, err
	}
	return f.Device.WriteAt(p, off)
}

// WritevAt writes through (as one request) unless a write fault has been reached.
func (f *Faulty) WritevAt(bufs [][]byte, off int64) (int, error) {
	if err := f.admitWrite(off); err != nil {
		return 0, err
	}
	return f.Device.WritevAt(bufs, off)
}

// Flush flushes through unless FailFlush is on or the device has stopped.
func (f *Faulty) Flush() error {
	f.mu.Lock()
	fail, stopped := f.failFlush, f.stopped
	f.mu.Unlock()
	if stopped {
		return fmt.Errorf("blockdev: injected device stop, flush: %w", syscall.EIO)
	}
	if fail {
		return fmt.Errorf("blockdev: injected flush fault: %w", syscall.EIO)
	}
	return f.Device.Flush()
}
