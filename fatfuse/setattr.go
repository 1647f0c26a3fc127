package fatfuse

import (
	"os"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Setattr changes size, times and the mode, as vfat's fat_setattr: FAT keeps no owner and no
// permissions beyond the read-only attribute, so chown to another owner and mode bits outside
// 0777 are refused (EPERM, or ignored with quiet), and a mode FAT cannot hold is ignored.
func (n *node) setattr(h *handle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.change(h, in); e != 0 {
		return e
	}
	return n.getattr(h, out)
}

func (n *node) change(h *handle, in *fuse.SetAttrIn) syscall.Errno {
	s := n.srv
	var file *fatvol.File
	if h != nil {
		f, e := h.file()
		if e != 0 {
			return e
		}
		file = f
	}
	s.ns.RLock()
	defer s.ns.RUnlock()
	s.mu.Lock()
	p, linked := n.pathLocked()
	if file == nil {
		// Removed since the kernel found it (truncate or utimes of /proc/self/fd/N).
		file = n.anchor
	}
	lost := n.lost || (n.unlinked && file == nil && !n.isDir)
	s.mu.Unlock()
	switch {
	case lost:
		return syscall.EIO // its file cannot be found again (node.opened)
	case !linked && file == nil:
		return syscall.ENOENT // a removed directory
	}
	mode, setMode := in.GetMode()
	uid, setUID := in.GetUID()
	gid, setGID := in.GetGID()
	if (setUID && uid != s.opts.UID) || (setGID && gid != s.opts.GID) || (setMode && mode&^0o777 != 0) {
		if !s.opts.Quiet {
			return syscall.EPERM
		}
		// vfat with quiet: the whole call succeeds and changes nothing.
		return 0
	}
	size, setSize := in.GetSize()
	atime, setAtime := in.GetATime()
	mtime, setMtime := in.GetMTime()
	if setSize || setAtime || setMtime || setMode {
		if e := s.writable(); e != 0 {
			return e
		}
	}
	if setSize {
		if e := n.truncate(file, p, linked, int64(size)); e != 0 {
			return e
		}
	}
	if setAtime || setMtime {
		if !setAtime {
			atime = time.Time{}
		}
		if !setMtime {
			mtime = time.Time{}
		}
		// Through the handle when there is one: futimens reaches a removed file too.
		var err error
		if file != nil {
			err = file.Chtimes(atime, mtime)
		} else {
			err = s.vol.Chtimes(p, atime, mtime)
		}
		if err != nil {
			return s.errno(err)
		}
	}
	if setMode && linked {
		if e := n.chmod(p, mode); e != 0 {
			return e
		}
	}
	return 0
}

// truncate sets the size through the open handle when it allows writing (that also reaches a
// removed file), else by path: open(O_RDONLY|O_TRUNC) truncates on Linux too. A removed file
// whose handle is read-only is truncated through a writable handle opened from it.
func (n *node) truncate(file *fatvol.File, p string, linked bool, size int64) syscall.Errno {
	s := n.srv
	if file != nil {
		err := file.Truncate(size)
		if e := fatvol.Errno(err); err == nil || e != syscall.EBADF {
			return s.errno(err)
		}
		if !linked {
			w, err := file.Reopen(os.O_WRONLY)
			if err != nil {
				return s.errno(err)
			}
			err = w.Truncate(size)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			return s.errno(err)
		}
	}
	return s.errno(s.vol.Truncate(p, size))
}

// chmod maps the write bits to the read-only attribute as fat_sanitize_mode_change and
// fat_make_attrs do: of the r and x bits all (after the mask) must stay, of the w bits all or
// none; any other mode is silently not applied ("too old behavior" to return EPERM, says vfat).
func (n *node) chmod(p string, mode uint32) syscall.Errno {
	s := n.srv
	fi, err := s.vol.Stat(p)
	if err != nil {
		return s.errno(err)
	}
	a := fi.Sys().(*fatvol.Attr)
	isDir := fi.IsDir()
	mask := s.opts.FMask
	if isDir {
		mask = s.opts.DMask
	}
	perm := mode & 0o777 &^ mask
	cur := s.modeOf(isDir, a.Attributes)
	if perm&0o555 != cur&0o555 {
		return 0
	}
	allWrite := 0o222 &^ mask
	if !s.canHoldReadOnly(isDir) {
		return 0 // only the mode that is shown anyway is acceptable, and it changes nothing
	}
	if perm&0o222 != 0 && perm&0o222 != allWrite {
		return 0
	}
	readOnly := perm&0o222 == 0
	if readOnly == (a.Attributes&ondisk.AttrReadOnly != 0) {
		return 0
	}
	attrs := a.Attributes & (ondisk.AttrReadOnly | ondisk.AttrHidden | ondisk.AttrSystem | ondisk.AttrArchive)
	if readOnly {
		attrs |= ondisk.AttrReadOnly
	} else {
		attrs &^= ondisk.AttrReadOnly
	}
	return s.errno(s.vol.SetAttributes(p, attrs))
}
