package blockdev

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// StartWriteback starts writeback of the range with sync_file_range(SYNC_FILE_RANGE_WRITE): the
// kernel queues the dirty pages for the medium and returns. Large copies then overlap with the
// device's work instead of leaving it all to the final fdatasync.
func (d *File) StartWriteback(off, length int64) error {
	if d.readOnly || length <= 0 {
		return nil
	}
	var serr error
	err := d.control(func(fd int) {
		serr = unix.SyncFileRange(fd, off, length, unix.SYNC_FILE_RANGE_WRITE)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("blockdev %s: start writeback at %d: %w", d.path, off, err)
	}
	return nil
}
