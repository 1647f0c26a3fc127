package node

import (
	"errors"
	"io"
	"sync"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// meteredDevice is a served volume's device: blockdev's counters for the metrics, the device's
// path for the mount's source name, and a record of I/O errors for the volume's condition.
type meteredDevice struct {
	*blockdev.Counting
	path string

	mu      sync.Mutex
	errors  int64
	lastErr error
}

func newMeteredDevice(d blockdev.Device, path string) *meteredDevice {
	return &meteredDevice{Counting: blockdev.NewCounting(d), path: path}
}

// Path names the device in the mount table (fatfuse uses it as the file system's source).
func (d *meteredDevice) Path() string { return d.path }

func (d *meteredDevice) note(err error) {
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	d.mu.Lock()
	d.errors++
	d.lastErr = err
	d.mu.Unlock()
}

// ioErrors returns how many requests failed and the last failure.
func (d *meteredDevice) ioErrors() (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.errors, d.lastErr
}

func (d *meteredDevice) ReadAt(p []byte, off int64) (int, error) {
	n, err := d.Counting.ReadAt(p, off)
	d.note(err)
	return n, err
}

func (d *meteredDevice) WriteAt(p []byte, off int64) (int, error) {
	n, err := d.Counting.WriteAt(p, off)
	d.note(err)
	return n, err
}

func (d *meteredDevice) WritevAt(bufs [][]byte, off int64) (int, error) {
	n, err := d.Counting.WritevAt(bufs, off)
	d.note(err)
	return n, err
}

func (d *meteredDevice) Flush() error {
	err := d.Counting.Flush()
	d.note(err)
	return err
}
