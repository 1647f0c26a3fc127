package fatvol

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// The engine reports failures as syscall errnos wrapped in *fs.PathError, the errno Linux vfat
// would return, so the FUSE binding passes them through unchanged and errors.Is works with both
// the errno and io/fs's sentinels (syscall.ENOENT is fs.ErrNotExist, and so on).
var (
	errNoSpace  = syscall.ENOSPC
	errReadOnly = syscall.EROFS
)

func pathErr(op, path string, err error) error {
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// nameErr maps ondisk's name errors to the errnos vfat returns for them.
func nameErr(err error) error {
	switch {
	case errors.Is(err, ondisk.ErrNameTooLong):
		return syscall.ENAMETOOLONG
	case errors.Is(err, ondisk.ErrInvalidName):
		return syscall.EINVAL
	}
	return err
}

// Errno extracts the errno an engine error stands for, EIO when it stands for none.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, fs.ErrPermission):
		return syscall.EPERM
	case errors.Is(err, fs.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, errClosed):
		return syscall.EBADF
	}
	return syscall.EIO
}
