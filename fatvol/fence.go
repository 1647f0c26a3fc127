package fatvol

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// fencedDevice stands between the engine and its device and stops all writing at the first
// failed write or flush. A device that failed a write may have kept any part of what it was
// given; writing more (a directory entry pointing at a chain that never landed, FSINFO, the
// clean bit at close) could only make what is on it worse, and a vanished device would be
// retried for ever by the background writer. So, as Linux's errors=remount-ro, the volume takes
// no more writes until it is opened again: what already reached the device stays as it was.
//
// Every error it passes up wraps syscall.EIO: a pulled stick answers writes with ENOSPC (its
// capacity drops to zero) and reads with EOF, and applications must not read either as "the
// file system is full" or "end of file".
type fencedDevice struct {
	blockdev.Device
	latch bool // false under ContinueAfterDeviceError: errors are still EIO, but writing goes on

	mu     sync.Mutex
	failed error // the first failed write or flush; nil while the device works
}

func newFencedDevice(d blockdev.Device, latch bool) *fencedDevice {
	return &fencedDevice{Device: d, latch: latch}
}

// errFenced wraps the error that stopped writing.
type errFenced struct{ cause error }

func (e *errFenced) Error() string {
	return fmt.Sprintf("device failed, the volume takes no more writes: %v", e.cause)
}

// Unwrap is EIO, not the device's own errno: see fencedDevice.
func (e *errFenced) Unwrap() error { return syscall.EIO }

// err returns the error that stopped writing, or nil.
func (d *fencedDevice) err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

// trip records a failed write or flush and returns it as EIO.
func (d *fencedDevice) trip(err error) error {
	if err == nil {
		return nil
	}
	if !d.latch {
		if errors.Is(err, syscall.EIO) {
			return err
		}
		return fmt.Errorf("%v: %w", err, syscall.EIO)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed == nil {
		d.failed = &errFenced{cause: err}
	}
	return d.failed
}

func (d *fencedDevice) WriteAt(p []byte, off int64) (int, error) {
	if err := d.err(); err != nil {
		return 0, err
	}
	n, err := d.Device.WriteAt(p, off)
	return n, d.trip(err)
}

func (d *fencedDevice) WritevAt(bufs [][]byte, off int64) (int, error) {
	if err := d.err(); err != nil {
		return 0, err
	}
	n, err := d.Device.WritevAt(bufs, off)
	return n, d.trip(err)
}

func (d *fencedDevice) StartWriteback(off, length int64) error {
	if err := d.err(); err != nil {
		return err
	}
	return d.trip(d.Device.StartWriteback(off, length))
}

func (d *fencedDevice) Flush() error {
	if err := d.err(); err != nil {
		return err
	}
	return d.trip(d.Device.Flush())
}

// ReadAt passes reads through even after a failed write, so what is in memory and on a device
// that still answers stays readable. The engine reads only inside the device, so a short read is
// a device that shrank or vanished: EIO, as is any other read error.
func (d *fencedDevice) ReadAt(p []byte, off int64) (int, error) {
	n, err := d.Device.ReadAt(p, off)
	if err == nil || (n == len(p) && errors.Is(err, io.EOF)) {
		return n, nil
	}
	if errors.Is(err, syscall.EIO) {
		return n, err
	}
	return n, fmt.Errorf("read at %d: %w (%v)", off, syscall.EIO, err)
}
