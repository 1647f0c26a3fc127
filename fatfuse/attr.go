package fatfuse

import (
	"io/fs"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// modeOf is the permission bits vfat shows for an entry: 0777 less the mask, and for files the
// read-only attribute clearing the write bits (directories ignore it without rodir).
func (s *Server) modeOf(isDir bool, attrs uint8) uint32 {
	if isDir {
		return 0o777 &^ s.opts.DMask
	}
	m := 0o777 &^ s.opts.FMask
	if attrs&ondisk.AttrReadOnly != 0 {
		m &^= 0o222
	}
	return m
}

// canHoldReadOnly tells whether chmod may map a file's write bits to the read-only attribute:
// not when the mask leaves no write bit to show (vfat's fat_mode_can_hold_ro, without rodir).
func (s *Server) canHoldReadOnly(isDir bool) bool {
	return !isDir && (0o777&^s.opts.FMask)&0o222 != 0
}

// fillAttr describes fi as vfat's getattr would. n is the node, for a directory's link count.
func (s *Server) fillAttr(n *node, fi fs.FileInfo, out *fuse.Attr) {
	a := fi.Sys().(*fatvol.Attr)
	isDir := fi.IsDir()
	out.Mode = s.modeOf(isDir, a.Attributes)
	out.Uid, out.Gid = s.opts.UID, s.opts.GID
	out.Blksize = uint32(s.geoCluster)
	var size int64
	switch {
	case isDir && n == s.root && s.fixedRoot > 0:
		size = s.fixedRoot
	case isDir:
		// vfat shows a directory's allocated size; the engine does not report the chain's
		// length, so one cluster stands in for it.
		size = s.geoCluster
	default:
		size = a.Size
	}
	out.Size = uint64(size)
	out.Blocks = uint64((size + s.geoCluster - 1) / s.geoCluster * s.geoCluster / 512)
	out.Nlink = 1
	if n != nil {
		out.Ino = n.ino
		s.mu.Lock()
		if n.unlinked {
			out.Nlink = 0 // removed while open, as fstat shows it on Linux
		}
		s.mu.Unlock()
	}
	if isDir && out.Nlink != 0 {
		out.Nlink = uint32(2 + s.subdirs(n))
	}
	if isDir {
		out.Mode |= syscall.S_IFDIR
	} else {
		out.Mode |= syscall.S_IFREG
	}
	setTime(&out.Mtime, &out.Mtimensec, a.Modified)
	setTime(&out.Ctime, &out.Ctimensec, a.Modified) // vfat: ctime is the modification time
	setTime(&out.Atime, &out.Atimensec, a.Accessed)
}

// setTime stores t, the epoch for FAT's "no time" (the root, zeroed entries).
func setTime(sec *uint64, nsec *uint32, t time.Time) {
	if t.IsZero() || t.Unix() < 0 {
		*sec, *nsec = 0, 0
		return
	}
	*sec, *nsec = uint64(t.Unix()), uint32(t.Nanosecond())
}

// subdirs counts the subdirectories of directory n, cached until its entries change.
func (s *Server) subdirs(n *node) int {
	if n == nil {
		return 0
	}
	s.mu.Lock()
	c, version := n.subdirs, n.version
	p, ok := n.pathLocked()
	s.mu.Unlock()
	if c >= 0 || !ok {
		return max(c, 0)
	}
	entries, err := s.vol.ReadDir(p)
	if err != nil {
		return 0
	}
	c = 0
	for _, e := range entries {
		if e.IsDir() {
			c++
		}
	}
	s.mu.Lock()
	if n.version == version {
		n.subdirs = c
	}
	s.mu.Unlock()
	return c
}
