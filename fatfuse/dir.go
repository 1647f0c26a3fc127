package fatfuse

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Lookup finds name in directory n, case-insensitively as FAT does.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	s := n.srv
	if _, err := ondisk.CleanName(name); errors.Is(err, ondisk.ErrNameTooLong) {
		return nil, syscall.ENAMETOOLONG
	}
	s.ns.RLock()
	defer s.ns.RUnlock()
	p, e := n.childPath(name)
	if e != 0 {
		return nil, e
	}
	fi, err := s.vol.Stat(p)
	if err != nil {
		return nil, s.errno(err)
	}
	in := s.entry(ctx, n, fi, out)
	if name != fi.Name() {
		if c, ok := in.Operations().(*node); ok {
			s.addAlias(c, n, name)
		}
	}
	return in, 0
}

// entry returns the inode for fi, found in directory parent, and describes it in out.
func (s *Server) entry(ctx context.Context, parent *node, fi fs.FileInfo, out *fuse.EntryOut) *gofs.Inode {
	in := s.childInode(ctx, parent, fi)
	c, _ := in.Operations().(*node)
	s.fillAttr(ctx, c, fi, &out.Attr)
	return in
}

// Getattr describes the node, through an open handle when there is one, else through its
// anchor once removed: both also serve files that were removed while open.
func (n *node) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s := n.srv
	var fi fs.FileInfo
	var err error
	if h, ok := f.(engineFile); ok {
		fi, err = h.engineFile().Stat()
	} else {
		s.ns.RLock()
		fi, err = n.stat()
		s.ns.RUnlock()
	}
	if err != nil {
		return s.errno(err)
	}
	s.fillAttr(ctx, n, fi, &out.Attr)
	return 0
}

// stat describes the node by its path, or through its anchor once removed. The caller holds
// s.ns for reading.
func (n *node) stat() (fs.FileInfo, error) {
	n.srv.mu.Lock()
	a := n.anchor
	p, linked := n.pathLocked()
	n.srv.mu.Unlock()
	switch {
	case a != nil:
		return a.Stat()
	case !linked:
		return nil, syscall.ENOENT // a removed directory
	}
	return n.srv.vol.Stat(p)
}

// Mkdir makes a directory; FAT keeps no mode, so mode is not used.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	s := n.srv
	if e := s.writable(); e != 0 {
		return nil, e
	}
	s.ns.RLock()
	defer s.ns.RUnlock()
	p, e := n.childPath(name)
	if e != 0 {
		return nil, e
	}
	if err := s.retryNoSpace(func() error { return s.vol.Mkdir(p) }); err != nil {
		return nil, s.errno(err)
	}
	n.dirChanged()
	fi, err := s.vol.Stat(p)
	if err != nil {
		return nil, s.errno(err)
	}
	in := s.entry(ctx, n, fi, out)
	return in, 0
}

// Rmdir removes an empty directory.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, true)
}

// Unlink removes a file; handles still open keep working until closed.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, false)
}

func (n *node) remove(name string, dir bool) syscall.Errno {
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
	s.mu.Unlock()
	closeAnchor(unused)
	forgetAliases(stale)
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

// Rename moves name in n to newName in newParent, with renameat2's NOREPLACE and EXCHANGE.
func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	s := n.srv
	if e := s.writable(); e != 0 {
		return e
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
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
	var stale []alias
	var unused *fatvol.File
	defer func() { forgetAliases(stale); closeAnchor(unused) }()
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

// Create makes and opens a file. A mode without write bits gives it the read-only attribute.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	s := n.srv
	if e := s.writable(); e != 0 {
		return nil, nil, 0, e
	}
	s.ns.RLock()
	defer s.ns.RUnlock()
	p, e := n.childPath(name)
	if e != 0 {
		return nil, nil, 0, e
	}
	var f *fatvol.File
	err := s.retryNoSpace(func() error {
		var err error
		f, err = s.vol.OpenFile(p, openFlags(flags)|os.O_CREATE|int(flags)&os.O_EXCL, fs.FileMode(mode&0o777))
		return err
	})
	if err != nil {
		return nil, nil, 0, s.errno(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, 0, s.errno(err)
	}
	in := s.entry(ctx, n, fi, out)
	return in, &handle{srv: s, f: f}, openReply, 0
}

// Mknod makes regular files (mknod(2) with S_IFREG); FAT holds no other kind, and vfat answers
// EPERM for them.
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if mode&syscall.S_IFMT != syscall.S_IFREG && mode&syscall.S_IFMT != 0 {
		return nil, syscall.EPERM
	}
	in, h, _, e := n.Create(ctx, name, syscall.O_WRONLY|syscall.O_EXCL, mode, out)
	if e != 0 {
		return nil, e
	}
	h.(*handle).Release(ctx)
	return in, 0
}

// Symlink fails as on vfat: FAT has no symbolic links.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Link fails as on vfat: FAT has no hard links.
func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Statfs reports the volume in clusters, as vfat does, and files by the estimate the driver's
// volume stats report too (vfat shows none).
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	n.srv.settle()
	st, err := n.srv.vol.StatFS()
	if err != nil {
		return n.srv.errno(err)
	}
	files, err := n.srv.vol.Files()
	if err != nil {
		return n.srv.errno(err)
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

var (
	_ gofs.NodeGetattrer = (*node)(nil)
	_ gofs.NodeMkdirer   = (*node)(nil)
	_ gofs.NodeRmdirer   = (*node)(nil)
	_ gofs.NodeUnlinker  = (*node)(nil)
	_ gofs.NodeRenamer   = (*node)(nil)
	_ gofs.NodeCreater   = (*node)(nil)
	_ gofs.NodeMknoder   = (*node)(nil)
	_ gofs.NodeSymlinker = (*node)(nil)
	_ gofs.NodeLinker    = (*node)(nil)
	_ gofs.NodeStatfser  = (*node)(nil)
)
