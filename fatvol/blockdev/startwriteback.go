package blockdev

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// StartWriteback starts writeback of the range with sync_file_range(SYNC_FILE_RANGE_WRITE): the
// kernel queues the dirty pages for the medium and returns. Large copies then overlap with the
// device's work instead of leaving it all to the final fdatasync. It then waits until the span
// started before this one is written: the medium stays busy with this span meanwhile, and the
// device's dirty page cache stays within two spans, so a long copy neither holds the page cache
// of its whole size dirty nor, in a memory-limited container (a mounter pod), is killed for
// page cache it cannot reclaim in time.
func (d *File) StartWriteback(off, length int64) error {
	if d.readOnly || length <= 0 {
		return nil
	}
	d.spanMu.Lock()
	defer d.spanMu.Unlock()
	var serr error
	err := d.control(func(fd int) {
		serr = unix.SyncFileRange(fd, off, length, unix.SYNC_FILE_RANGE_WRITE)
		if serr == nil && d.spanLen > 0 {
			serr = unix.SyncFileRange(fd, d.spanOff, d.spanLen,
				unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("blockdev %s: start writeback at %d: %w", d.path, off, err)
	}
	d.spanOff, d.spanLen = off, length
	return nil
}
