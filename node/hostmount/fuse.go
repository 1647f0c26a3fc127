package hostmount

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// mountFlags turns the options the kernel applies to a mount into mount(2)'s flags, as
// fusermount does; nosuid and nodev are always in force.
func mountFlags(opts mountopt.Options) uintptr {
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if opts.ReadOnly {
		flags |= unix.MS_RDONLY
	}
	for _, k := range opts.Kernel {
		switch k {
		case "noexec":
			flags |= unix.MS_NOEXEC
		case "exec":
			flags &^= unix.MS_NOEXEC
		case "noatime":
			flags |= unix.MS_NOATIME
		case "atime":
			flags &^= unix.MS_NOATIME
		case "relatime":
			flags |= unix.MS_RELATIME
		case "norelatime":
			flags &^= unix.MS_RELATIME
		case "strictatime":
			flags |= unix.MS_STRICTATIME
		case "nodiratime":
			flags |= unix.MS_NODIRATIME
		case "diratime":
			flags &^= unix.MS_NODIRATIME
		case "lazytime":
			flags |= unix.MS_LAZYTIME
		case "nolazytime":
			flags &^= unix.MS_LAZYTIME
		}
	}
	return flags
}

// MountFUSE opens /dev/fuse and mounts it at path with the options fusermount would pass, so
// the mount looks as one go-fuse makes: type fuse.fat, the device as its source.
func MountFUSE(source, path string, opts mountopt.Options) (*os.File, error) {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	data := []string{
		"fd=" + strconv.Itoa(int(f.Fd())),
		"rootmode=40000",
		"user_id=" + strconv.Itoa(os.Geteuid()),
		"group_id=" + strconv.Itoa(os.Getegid()),
		"max_read=" + strconv.Itoa(fuse.MAX_KERNEL_WRITE),
		"default_permissions",
		"allow_other",
	}
	if abs, err := filepath.Abs(source); err == nil {
		source = abs
	}
	if err := unix.Mount(source, path, "fuse.fat", mountFlags(opts), strings.Join(data, ",")); err != nil {
		f.Close()
		return nil, fmt.Errorf("mount fuse at %s: %w", path, err)
	}
	return f, nil
}
