package blockdev

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CopyOptions bound a copy.
type CopyOptions struct {
	// Budget bounds the bytes a sparse copy may write (0: no bound): the room its destination's
	// file system has. A reflink writes nothing and is not bounded.
	Budget int64
	// Deadline ends a sparse copy that is not done by then (zero: none).
	Deadline time.Time
}

// CopyResult says how a copy went.
type CopyResult struct {
	// Reflinked: the destination shares the source's extents (FICLONE); nothing was written.
	Reflinked bool
	// Written is the bytes a sparse copy wrote.
	Written int64
}

// ErrBudget is wrapped by a sparse copy that would write more than its budget.
var ErrBudget = errors.New("the copy needs more room than its budget")

// ErrDeadline is wrapped by a sparse copy that did not end by its deadline.
var ErrDeadline = errors.New("the copy did not end by its deadline")

// copyChunk is what a sparse copy reads at a time; zeroBlock the unit it leaves a hole for.
const (
	copyChunk = 1 << 20
	zeroBlock = 4096
)

// CopyImage copies the first size bytes of src (an image file or a block device) into dst, an
// empty regular file or a block device. Where dst's file system can share src's extents
// (a reflink: XFS, Btrfs, bcachefs, OCFS2) it clones the whole file in one FICLONE, which takes a
// moment whatever the size; else it copies the data regions of src (SEEK_DATA/SEEK_HOLE skip an
// image's holes; a block device is all data) and writes only the blocks that are not all zeros,
// so dst stays sparse. The caller makes a file durable (fsync) when it needs to: a copy of a
// volume in use is done once the reads are, and its writes may reach the disk after the hold.
//
// A block device gets every byte: the data regions as they are and zeros over the holes
// (BLKZEROOUT, else written). Its first block is zeroed first and written last, with a flush
// before and after, so a copy cut short leaves no file system on the device rather than part of
// one, and the whole copy is durable on return.
func CopyImage(dst, src *os.File, size int64, opts CopyOptions) (CopyResult, error) {
	if st, err := dst.Stat(); err == nil && st.Mode()&os.ModeDevice != 0 {
		written, err := copyToDevice(dst, src, size, opts)
		if err != nil {
			return CopyResult{Written: written}, fmt.Errorf("copy %s to %s: %w", src.Name(), dst.Name(), err)
		}
		return CopyResult{Written: written}, nil
	}
	if st, err := src.Stat(); err == nil && st.Mode().IsRegular() && st.Size() == size {
		err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
		if err == nil {
			return CopyResult{Reflinked: true}, nil
		}
		if !cannotClone(err) {
			return CopyResult{}, fmt.Errorf("copy %s to %s: FICLONE: %w", src.Name(), dst.Name(), err)
		}
	}
	written, err := sparseCopy(dst, src, size, opts)
	if err != nil {
		return CopyResult{Written: written}, fmt.Errorf("copy %s to %s: %w", src.Name(), dst.Name(), err)
	}
	return CopyResult{Written: written}, nil
}

// cannotClone tells whether FICLONE's failure means only that these files cannot share extents.
func cannotClone(err error) bool {
	for _, e := range []error{unix.EOPNOTSUPP, unix.ENOTSUP, unix.EXDEV, unix.EINVAL, unix.ENOTTY, unix.ENOSYS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sparseCopy copies src's data regions below size into dst, leaving holes for zeros.
func sparseCopy(dst, src *os.File, size int64, opts CopyOptions) (int64, error) {
	if err := dst.Truncate(size); err != nil {
		return 0, err
	}
	buf := make([]byte, copyChunk)
	var written int64
	off := int64(0)
	for off < size {
		start, end, err := dataRegion(src, off, size)
		if err != nil {
			return written, err
		}
		if start >= size {
			break
		}
		for pos := start; pos < end; {
			if !opts.Deadline.IsZero() && time.Now().After(opts.Deadline) {
				return written, ErrDeadline
			}
			n := int(min(int64(len(buf)), end-pos))
			if err := readFull(src, buf[:n], pos); err != nil {
				return written, err
			}
			// Write the runs of blocks that are not all zeros.
			for i := 0; i < n; {
				j := i
				for j < n && !isZero(buf[j:min(j+zeroBlock, n)]) {
					j = min(j+zeroBlock, n)
				}
				if j > i {
					if opts.Budget > 0 && written+int64(j-i) > opts.Budget {
						return written, fmt.Errorf("%w (%d bytes)", ErrBudget, opts.Budget)
					}
					if _, err := dst.WriteAt(buf[i:j], pos+int64(i)); err != nil {
						return written, fmt.Errorf("write at %d: %w", pos+int64(i), err)
					}
					written += int64(j - i)
				}
				for j < n && isZero(buf[j:min(j+zeroBlock, n)]) {
					j = min(j+zeroBlock, n)
				}
				i = j
			}
			pos += int64(n)
		}
		off = end
	}
	return written, nil
}

// readFull reads len(b) bytes at off; what lies past the end of src reads as zeros.
func readFull(src *os.File, b []byte, off int64) error {
	n, err := src.ReadAt(b, off)
	if errors.Is(err, io.EOF) {
		clear(b[n:])
		return nil
	}
	if err != nil {
		return fmt.Errorf("read at %d: %w", off, err)
	}
	return nil
}

var zeros [zeroBlock]byte

func isZero(b []byte) bool { return bytes.Equal(b, zeros[:len(b)]) }

// dataRegion finds the next region of data at or after off, below size: [start, end). A file
// system or device that cannot tell holes from data makes everything data.
func dataRegion(f *os.File, off, size int64) (start, end int64, err error) {
	fd := int(f.Fd())
	start, err = unix.Seek(fd, off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return size, size, nil // no data after off
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
		return off, size, nil
	case err != nil:
		return 0, 0, fmt.Errorf("seek data at %d: %w", off, err)
	}
	if start >= size {
		return size, size, nil
	}
	end, err = unix.Seek(fd, start, unix.SEEK_HOLE)
	if err != nil {
		return start, size, nil
	}
	return start, min(end, size), nil
}

// headBlock is the first part of a device, holding the boot sector, that a copy onto a device
// writes last.
const headBlock = 64 << 10

// copyToDevice writes src's first size bytes over dst, a block device: its first headBlock
// bytes zeroed first and written last, everything else in between, holes as zeros.
func copyToDevice(dst, src *os.File, size int64, opts CopyOptions) (int64, error) {
	head := min(int64(headBlock), size)
	if err := zeroRange(dst, 0, head); err != nil {
		return 0, err
	}
	if err := dst.Sync(); err != nil {
		return 0, err
	}
	buf := make([]byte, copyChunk)
	written := head
	for off := head; off < size; {
		start, end, err := dataRegion(src, off, size)
		if err != nil {
			return written, err
		}
		if err := zeroRange(dst, off, start-off); err != nil {
			return written, err
		}
		for pos := start; pos < end; {
			if !opts.Deadline.IsZero() && time.Now().After(opts.Deadline) {
				return written, ErrDeadline
			}
			n := int(min(int64(len(buf)), end-pos))
			if err := readFull(src, buf[:n], pos); err != nil {
				return written, err
			}
			if _, err := dst.WriteAt(buf[:n], pos); err != nil {
				return written, fmt.Errorf("write at %d: %w", pos, err)
			}
			pos += int64(n)
		}
		written += end - start
		off = end
	}
	if err := dst.Sync(); err != nil {
		return written, err
	}
	first := make([]byte, head)
	if err := readFull(src, first, 0); err != nil {
		return written, err
	}
	if _, err := dst.WriteAt(first, 0); err != nil {
		return written, fmt.Errorf("write at 0: %w", err)
	}
	return written, dst.Sync()
}

// blkZeroOut is the BLKZEROOUT ioctl, _IO(0x12, 127): zero a byte range of a block device,
// which the device may do without transferring the zeros.
const blkZeroOut = 0x127f

// zeroRange zeroes n bytes of a block device at off: BLKZEROOUT, else written zeros.
func zeroRange(dev *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	if off%512 == 0 && n%512 == 0 {
		r := [2]uint64{uint64(off), uint64(n)}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, dev.Fd(), blkZeroOut, uintptr(unsafe.Pointer(&r)))
		if errno == 0 {
			return nil
		}
	}
	buf := make([]byte, min(n, copyChunk))
	for done := int64(0); done < n; {
		k := min(int64(len(buf)), n-done)
		if _, err := dev.WriteAt(buf[:k], off+done); err != nil {
			return fmt.Errorf("zero at %d: %w", off+done, err)
		}
		done += k
	}
	return nil
}
