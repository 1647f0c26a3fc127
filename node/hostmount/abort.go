package hostmount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
)

// fuseConnections is the FUSE control file system, whose <minor>/abort ends a connection.
const fuseConnections = "/sys/fs/fuse/connections"

// AbortFUSE aborts the FUSE connection mounted at path, so that every request waiting on it and
// every later one fails (ENOTCONN) instead of waiting for a server that will never come. The
// connection is found by the mount's device number in the mount table: a stat of the mount
// itself would wait on the very connection. The control file system is mounted when it is not.
func (m *Table) AbortFUSE(path string) error {
	infos, err := mount.ParseMountInfo(m.mountInfo)
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	mp := canonical(path)
	minor := -1
	for _, mi := range infos {
		if mi.MountPoint == mp && (mi.FsType == "fuse" || len(mi.FsType) > 5 && mi.FsType[:5] == "fuse.") {
			minor = mi.Minor // the last one stacked there is the one in use
		}
	}
	if minor < 0 {
		return fmt.Errorf("abort the FUSE connection at %s: no FUSE mount there", path)
	}
	if _, err := os.Stat(filepath.Join(fuseConnections, "")); err == nil {
		if _, err := os.Stat(filepath.Join(fuseConnections, fmt.Sprint(minor))); errors.Is(err, os.ErrNotExist) {
			// Not mounted (the directory is empty): mount it.
			if err := unix.Mount("fusectl", fuseConnections, "fusectl", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("abort the FUSE connection at %s: mount %s: %w", path, fuseConnections, err)
			}
		}
	}
	abort := filepath.Join(fuseConnections, fmt.Sprint(minor), "abort")
	if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
		return fmt.Errorf("abort the FUSE connection at %s: %w", path, err)
	}
	return nil
}
