package blockdev

import (
	"fmt"
	"io"
	"os"
)

// Window is a Device that exposes [offset, offset+length) of another device: one partition of a
// partitioned image or whole device, served without the kernel's partition device (image files
// have none, and the claim stays on the whole medium). Nothing through a Window reaches outside
// it: a write or a writeback hint that does not fit is refused with ErrOutOfRange, and a read
// ends at the window's end as one at a device's end does.
type Window struct {
	dev       Device
	off, size int64
	blockSize int
}

var _ Device = (*Window)(nil)

// NewWindow makes the window [offset, offset+length) of dev. The offset must be a multiple of the
// device's logical block size and the window must lie inside the device; its I/O block size is
// chosen from its own size by ChooseBlockSize, as Linux chooses one for a partition device. The
// Window owns dev: closing it closes dev.
func NewWindow(dev Device, offset, length int64) (*Window, error) {
	lbs := int64(dev.LogicalBlockSize())
	switch {
	case offset < 0 || length <= 0 || offset > dev.Size()-length:
		return nil, fmt.Errorf("blockdev %s: window of %d bytes at %d on a %d-byte device: %w", pathOf(dev), length, offset, dev.Size(), ErrOutOfRange)
	case offset%lbs != 0 || length%lbs != 0:
		return nil, fmt.Errorf("blockdev %s: window of %d bytes at %d is not aligned to the %d-byte logical block size", pathOf(dev), length, offset, lbs)
	}
	return &Window{dev: dev, off: offset, size: length, blockSize: ChooseBlockSize(length, int(lbs), os.Getpagesize())}, nil
}

func pathOf(dev Device) string {
	if p, ok := dev.(interface{ Path() string }); ok {
		return p.Path()
	}
	return "device"
}

// Base returns the device the window is cut from.
func (w *Window) Base() Device { return w.dev }

// Offset returns where the window starts on its device.
func (w *Window) Offset() int64 { return w.off }

// Path returns the base device's path: the medium a mount table or a claim names.
func (w *Window) Path() string { return pathOf(w.dev) }

// Writer names who held the base medium for writing when it was opened Shared (File.Writer).
func (w *Window) Writer() string {
	if f, ok := w.dev.(interface{ Writer() string }); ok {
		return f.Writer()
	}
	return ""
}

// Size returns the window's length.
func (w *Window) Size() int64 { return w.size }

// LogicalBlockSize returns the base device's.
func (w *Window) LogicalBlockSize() int { return w.dev.LogicalBlockSize() }

// BlockSize returns the I/O block size chosen for the window's size.
func (w *Window) BlockSize() int { return w.blockSize }

// ReadAt reads inside the window: a read that reaches its end returns the bytes before it and
// io.EOF, one at a negative offset is refused.
func (w *Window) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("blockdev %s: window read at %d: %w", w.Path(), off, ErrOutOfRange)
	}
	if off >= w.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	short := false
	if rem := w.size - off; int64(len(p)) > rem {
		p, short = p[:rem], true
	}
	n, err := w.dev.ReadAt(p, w.off+off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

// checkWrite refuses a write of n bytes at off that does not fit inside the window.
func (w *Window) checkWrite(n, off int64) error {
	if off < 0 || n > w.size || off > w.size-n {
		return fmt.Errorf("blockdev %s: write of %d bytes at %d past the window's %d bytes (at %d on the device): %w",
			w.Path(), n, off, w.size, w.off, ErrOutOfRange)
	}
	return nil
}

// WriteAt writes p at off, entirely inside the window.
func (w *Window) WriteAt(p []byte, off int64) (int, error) {
	if err := w.checkWrite(int64(len(p)), off); err != nil {
		return 0, err
	}
	return w.dev.WriteAt(p, w.off+off)
}

// WritevAt writes bufs back to back at off, entirely inside the window, as one request.
func (w *Window) WritevAt(bufs [][]byte, off int64) (int, error) {
	var total int64
	for _, b := range bufs {
		total += int64(len(b))
	}
	if err := w.checkWrite(total, off); err != nil {
		return 0, err
	}
	return w.dev.WritevAt(bufs, w.off+off)
}

// StartWriteback passes the hint on for a range inside the window.
func (w *Window) StartWriteback(off, length int64) error {
	if length <= 0 {
		return nil
	}
	if err := w.checkWrite(length, off); err != nil {
		return err
	}
	return w.dev.StartWriteback(w.off+off, length)
}

// Flush flushes the base device: a flush has no range.
func (w *Window) Flush() error { return w.dev.Flush() }

// Close closes the base device.
func (w *Window) Close() error { return w.dev.Close() }
