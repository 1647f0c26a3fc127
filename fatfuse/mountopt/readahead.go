package mountopt

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/internal/mountinfo"
)

// ReadaheadKB is the read-ahead a mount should get: as far as one READ request reaches (max_read,
// the largest write go-fuse takes).
const ReadaheadKB = fuse.MAX_KERNEL_WRITE / 1024

// RaiseReadahead lets the kernel read ahead kb KiB at a time on the FUSE mount at mountpoint.
// FUSE takes the smaller of the server's max_readahead and the default 128 KiB, so a sequential
// read arrives as READ requests of 128 KiB, eight times the round trips (and the server's
// context switches) of the 1 MiB that max_read allows. Only the mount's backing device in sysfs
// can raise it, which needs root and a writable /sys; where that fails, the default stays.
//
// The mount's device number comes from /proc/self/mountinfo, never from a stat or statfs of the
// mount point: those are requests to the mount's own server, and a server that sends one to
// itself and is killed while it waits leaves a thread stuck in the kernel for good, holding the
// FUSE connection open (it can only be aborted through fusectl). The plugin, which mounts
// before any server runs, could not ask the mount at all.
func RaiseReadahead(mountpoint string, kb int) error {
	dev, err := MountDevice(mountpoint)
	if err != nil {
		return err
	}
	knob := fmt.Sprintf("/sys/class/bdi/%s/read_ahead_kb", dev)
	cur, err := os.ReadFile(knob)
	if err != nil {
		return fmt.Errorf("read ahead of %s: %w", mountpoint, err)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(cur))); err == nil && n >= kb {
		return nil
	}
	if err := os.WriteFile(knob, []byte(strconv.Itoa(kb)), 0); err != nil {
		return fmt.Errorf("read ahead of %s: %w", mountpoint, err)
	}
	return nil
}

// MountDevice finds the major:minor of the FUSE mount at mountpoint (the topmost, when
// several are stacked there) in /proc/self/mountinfo.
func MountDevice(mountpoint string) (string, error) {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return "", err
	}
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	dev := ""
	for _, m := range mounts {
		if m.MountPoint == abs && (m.FSType == "fuse" || strings.HasPrefix(m.FSType, "fuse.")) {
			dev = m.Device
		}
	}
	if dev == "" {
		return "", fmt.Errorf("%s is not a FUSE mount (not in /proc/self/mountinfo)", mountpoint)
	}
	return dev, nil
}
