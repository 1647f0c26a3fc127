package fatfuse

import (
	"errors"
	"io/fs"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// lookup finds name in directory n, case-insensitively as FAT does.
func (n *node) lookup(name string, out *fuse.EntryOut) syscall.Errno {
	s := n.srv
	if _, err := ondisk.CleanName(name); errors.Is(err, ondisk.ErrNameTooLong) {
		return syscall.ENAMETOOLONG
	}
	s.ns.RLock()
	defer s.ns.RUnlock()
	return n.lookupHeld(name, out)
}

// lookupHeld is lookup with s.ns held for reading.
func (n *node) lookupHeld(name string, out *fuse.EntryOut) syscall.Errno {
	s := n.srv
	p, e := n.childPath(name)
	if e != 0 {
		return e
	}
	fi, err := s.vol.Stat(p)
	if err != nil {
		return s.errno(err)
	}
	c := s.entry(n, fi, out)
	if name != fi.Name() {
		s.addAlias(c, n, name)
	}
	return 0
}

// entry hands the kernel the node for fi, found in directory parent, and describes it in out.
func (s *Server) entry(parent *node, fi fs.FileInfo, out *fuse.EntryOut) *node {
	c := s.lookedUp(parent, fi)
	out.NodeId, out.Generation = c.ino, c.gen
	s.fillAttr(c, fi, &out.Attr)
	out.SetEntryTimeout(cacheTimeout)
	out.SetAttrTimeout(cacheTimeout)
	return c
}

// getattr describes the node, through an open handle when there is one, else through its
// anchor once removed: both also serve files that were removed while open.
func (n *node) getattr(h *handle, out *fuse.AttrOut) syscall.Errno {
	s := n.srv
	var fi fs.FileInfo
	var err error
	if h != nil {
		f, e := h.file()
		if e != 0 {
			return e
		}
		fi, err = f.Stat()
	} else {
		s.ns.RLock()
		fi, err = n.stat()
		s.ns.RUnlock()
	}
	if err != nil {
		return s.errno(err)
	}
	s.fillAttr(n, fi, &out.Attr)
	out.SetTimeout(cacheTimeout)
	return 0
}

// stat describes the node by its path, or through its anchor once removed. The caller holds
// s.ns for reading.
func (n *node) stat() (fs.FileInfo, error) {
	n.srv.mu.Lock()
	a := n.anchor
	p, linked := n.pathLocked()
	lost := n.lost || (n.unlinked && a == nil && !n.isDir)
	n.srv.mu.Unlock()
	switch {
	case a != nil:
		return a.Stat()
	case lost:
		return nil, syscall.EIO
	case !linked:
		return nil, syscall.ENOENT // a removed directory
	}
	return n.srv.vol.Stat(p)
}

// mkdir makes a directory; FAT keeps no mode. Sent again after a takeover, it finds the
// directory the dead server made and answers as if it had just made it.
func (n *node) mkdir(name string, resent bool, out *fuse.EntryOut) syscall.Errno {
	s := n.srv
	if e := s.writable(); e != 0 {
		return e
	}
	s.ns.RLock()
	defer s.ns.RUnlock()
	p, e := n.childPath(name)
	if e != 0 {
		return e
	}
	err := s.retryNoSpace(func() error { return s.vol.Mkdir(p) })
	if err != nil && !(resent && fatvol.Errno(err) == syscall.EEXIST && isDir(s.vol.Stat(p))) {
		return s.errno(err)
	}
	n.dirChanged()
	fi, err := s.vol.Stat(p)
	if err != nil {
		return s.errno(err)
	}
	s.entry(n, fi, out)
	return 0
}

func isDir(fi fs.FileInfo, err error) bool { return err == nil && fi.IsDir() }

// remove removes a file or an empty directory; handles still open on a file keep working until
// closed. Sent again after a takeover, a name already gone was removed by the dead server.
func (n *node) remove(name string, dir, resent bool) syscall.Errno {
	s := n.srv
	if e := s.writable(); e != 0 {
		return e
	}
	s.ns.Lock()
	defer s.ns.Unlock()
	p, e := n.childPath(name)
	if e != 0 {
		return e
	}
	fi, err := s.vol.Stat(p)
	if err != nil {
		if resent && fatvol.Errno(err) == syscall.ENOENT {
			return 0
		}
		return s.errno(err)
	}
	switch {
	case dir && !fi.IsDir():
		return syscall.ENOTDIR
	case !dir && fi.IsDir():
		return syscall.EISDIR
	}
	pos := fi.Sys().(*fatvol.Attr).Pos
	anchor, err := s.anchorFor(p, pos, dir)
	if err != nil {
		return s.errno(err)
	}
	if err := s.vol.Remove(p); err != nil {
		closeAnchor(anchor)
		return s.errno(err)
	}
	s.mu.Lock()
	stale, unused := s.removedLocked(pos, anchor)
	n.moves++
	s.mu.Unlock()
	closeAnchor(unused)
	s.forgetAliases(stale)
	if dir {
		n.dirChanged()
	}
	return 0
}

// renameat2(2) flags.
const (
	renameNoReplace = 1 << 0
	renameExchange  = 1 << 1
)

// rename moves name in n to newName in np, with renameat2's NOREPLACE and EXCHANGE; unique is
// the request's number. Sent again after a takeover, a rename the dead server recorded as
// applied (done.go), or whose source is gone and destination present, is answered as done.
func (n *node) rename(name string, np *node, newName string, flags uint32, unique uint64) syscall.Errno {
	s := n.srv
	if e := s.writable(); e != 0 {
		return e
	}
	resent := unique&resendBit != 0
	if resent && s.wasApplied(unique) {
		return 0
	}
	s.ns.Lock()
	defer s.ns.Unlock()
	var fl fatvol.RenameFlags
	switch flags {
	case 0:
	case renameNoReplace:
		fl = fatvol.RenameNoReplace
	case renameExchange:
		fl = fatvol.RenameExchange
	default:
		return syscall.EINVAL // as vfat: no whiteouts, no combinations
	}
	op, e := n.childPath(name)
	if e != 0 {
		return e
	}
	nw, e := np.childPath(newName)
	if e != 0 {
		return e
	}
	src, err := s.vol.Stat(op)
	if err != nil {
		if resent && fl != fatvol.RenameExchange && fatvol.Errno(err) == syscall.ENOENT {
			if _, derr := s.vol.Stat(nw); derr == nil {
				return 0
			}
		}
		return s.errno(err)
	}
	dst, derr := s.vol.Stat(nw)
	srcPos := src.Sys().(*fatvol.Attr).Pos
	// A file replaced by the rename stays openable for the kernel's inode of it.
	var anchor *fatvol.File
	if derr == nil && fl != fatvol.RenameExchange {
		if dp := dst.Sys().(*fatvol.Attr).Pos; dp != srcPos {
			if anchor, err = s.anchorFor(nw, dp, dst.IsDir()); err != nil {
				return s.errno(err)
			}
		}
	}
	if err := s.vol.RenameWithFlags(op, nw, fl); err != nil {
		closeAnchor(anchor)
		return s.errno(err)
	}
	s.mu.Lock()
	n.moves++
	np.moves++
	s.appliedLocked(unique)
	s.mu.Unlock()
	var stale []alias
	var unused *fatvol.File
	defer func() { s.forgetAliases(stale); closeAnchor(unused) }()
	if fl == fatvol.RenameExchange {
		// The entries swap contents; each position keeps its name.
		dstPos := dst.Sys().(*fatvol.Attr).Pos
		s.mu.Lock()
		a, b := s.byPos[srcPos], s.byPos[dstPos]
		stale = s.takeAliasesLocked(a, b)
		delete(s.byPos, srcPos)
		delete(s.byPos, dstPos)
		if a != nil {
			s.movedLocked(a, np, dst.Name(), dstPos)
		}
		if b != nil {
			s.movedLocked(b, n, src.Name(), srcPos)
		}
		s.mu.Unlock()
	} else {
		moved, err := s.vol.Stat(nw)
		if err != nil {
			unused = anchor
			return s.errno(err)
		}
		newPos := moved.Sys().(*fatvol.Attr).Pos
		s.mu.Lock()
		c := s.byPos[srcPos]
		stale = s.takeAliasesLocked(c)
		if derr == nil {
			if dp := dst.Sys().(*fatvol.Attr).Pos; dp != srcPos {
				var gone []alias
				gone, anchor = s.removedLocked(dp, anchor)
				stale = append(stale, gone...)
			}
		}
		unused = anchor
		if c != nil {
			s.movedLocked(c, np, moved.Name(), newPos)
		}
		s.mu.Unlock()
	}
	if src.IsDir() || (derr == nil && dst.IsDir()) {
		n.dirChanged()
		np.dirChanged()
	}
	return 0
}

// create makes and opens a file. A mode without write bits gives it the read-only attribute.
// Sent again after a takeover, an O_EXCL create that finds the file opens the one the dead
// server made.
func (n *node) create(name string, flags, mode uint32, resent bool, out *fuse.CreateOut) syscall.Errno {
	s := n.srv
	if e := s.writable(); e != 0 {
		return e
	}
	s.ns.RLock()
	defer s.ns.RUnlock()
	p, e := n.childPath(name)
	if e != 0 {
		return e
	}
	excl := int(flags) & os.O_EXCL
	if resent {
		excl = 0
	}
	var f *fatvol.File
	err := s.retryNoSpace(func() error {
		var err error
		f, err = s.vol.OpenFile(p, openFlags(flags)|os.O_CREATE|excl, fs.FileMode(mode&0o777))
		return err
	})
	if err != nil {
		return s.errno(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return s.errno(err)
	}
	c := s.entry(n, fi, &out.EntryOut)
	h := s.addHandle(c, f, flags, false)
	out.Fh, out.OpenFlags = h.fh, openReply
	return 0
}

// mknod makes regular files (mknod(2) with S_IFREG); FAT holds no other kind, and vfat answers
// EPERM for them.
func (n *node) mknod(name string, mode uint32, resent bool, out *fuse.EntryOut) syscall.Errno {
	if mode&syscall.S_IFMT != syscall.S_IFREG && mode&syscall.S_IFMT != 0 {
		return syscall.EPERM
	}
	var co fuse.CreateOut
	if e := n.create(name, syscall.O_WRONLY|syscall.O_EXCL, mode, resent, &co); e != 0 {
		return e
	}
	if h := n.srv.dropHandle(co.Fh); h != nil {
		h.release()
	}
	*out = co.EntryOut
	return 0
}

// statfs reports the volume in clusters, as vfat does, and files by the estimate the driver's
// volume stats report too (vfat shows none).
func (s *Server) statfs(out *fuse.StatfsOut) syscall.Errno {
	s.settle()
	st, err := s.vol.StatFS()
	if err != nil {
		return s.errno(err)
	}
	files, err := s.vol.Files()
	if err != nil {
		return s.errno(err)
	}
	out.Files = uint64(files.Total)
	out.Ffree = uint64(files.Free)
	out.Bsize = uint32(st.ClusterSize)
	out.Frsize = uint32(st.ClusterSize)
	out.Blocks = uint64(st.TotalClusters)
	out.Bfree = uint64(st.FreeClusters)
	out.Bavail = uint64(st.FreeClusters)
	// NAME_MAX: every name of up to 255 UTF-8 bytes fits in FAT's 255 UTF-16 units, so every
	// name up to this length is accepted (vfat's 255*6 promises names it refuses).
	out.NameLen = 255
	return 0
}
