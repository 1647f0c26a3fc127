package hostmount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	mount "k8s.io/mount-utils"
)

// Table does the node's bind mounts and mount-table look-ups with k8s.io/mount-utils.
type Table struct {
	mounter   mount.Interface
	mountInfo string // /proc/self/mountinfo
}

func NewTable() *Table {
	return &Table{mounter: mount.New(""), mountInfo: "/proc/self/mountinfo"}
}

// IsMountPoint tells whether path is a mount point, by the mount table, so that a dead FUSE
// mount (whose stat fails with ENOTCONN) counts too.
func (m *Table) IsMountPoint(path string) (bool, error) {
	infos, err := mount.ParseMountInfo(m.mountInfo)
	if err != nil {
		return false, fmt.Errorf("read mount table: %w", err)
	}
	path = canonical(path)
	for _, mi := range infos {
		if mi.MountPoint == path {
			return true, nil
		}
	}
	return false, nil
}

// canonical resolves symlinks in the parent of path, as the mount table shows mount points;
// the last element is left alone since a dead mount there cannot be resolved.
func canonical(path string) string {
	path = filepath.Clean(path)
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		return filepath.Join(dir, filepath.Base(path))
	}
	return path
}

// DetachAll removes every mount stacked at path, lazily, so that a dead FUSE mount left by a
// previous run of the plugin, or a bind mount of one, goes away even while something holds it.
func (m *Table) DetachAll(path string) error {
	for i := 0; i < 16; i++ {
		mounted, err := m.IsMountPoint(path)
		if err != nil || !mounted {
			return err
		}
		klog.InfoS("removing stale mount", "path", path)
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount stale mount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount stale mounts at %s: still mounted after 16 unmounts", path)
}

// Healthy tells whether path answers statfs: a dead FUSE mount fails with ENOTCONN.
func Healthy(path string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return nil
}

// Bind mounts source at target, read-only when asked.
func (m *Table) Bind(source, target string, readOnly bool) error {
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	if err := m.mounter.Mount(source, target, "", opts); err != nil {
		return fmt.Errorf("bind mount %s at %s: %w", source, target, err)
	}
	return nil
}

// Unmount unmounts target; a dead mount is detached instead. A busy mount is an error that
// wraps EBUSY.
func (m *Table) Unmount(target string) error {
	err := unix.Unmount(target, 0)
	if err == nil {
		return nil
	}
	if _, serr := os.Stat(target); serr != nil && mount.IsCorruptedMnt(serr) {
		return m.DetachAll(target)
	}
	return &os.PathError{Op: "unmount", Path: target, Err: err}
}
