package fatfuse

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fuseSuperMagic is the f_type statfs reports for a FUSE mount.
const fuseSuperMagic = 0x65735546

// raiseReadahead lets the kernel read ahead kb KiB at a time on the FUSE mount at mountpoint.
// FUSE takes the smaller of the server's max_readahead and the default 128 KiB, so a sequential
// read arrives as READ requests of 128 KiB, eight times the round trips (and the server's
// context switches) of the 1 MiB that max_read allows. Only the mount's backing device in sysfs
// can raise it, which needs root and a writable /sys; where that fails, the default stays.
func raiseReadahead(mountpoint string, kb int) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(mountpoint, &sfs); err != nil {
		return fmt.Errorf("statfs %s: %w", mountpoint, err)
	}
	if sfs.Type != fuseSuperMagic {
		return fmt.Errorf("%s is not a FUSE mount (file system type %#x)", mountpoint, sfs.Type)
	}
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err != nil {
		return fmt.Errorf("stat %s: %w", mountpoint, err)
	}
	knob := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
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
