package fatvol

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// File is an open file or directory. It is an fs.File (and fs.ReadDirFile for directories), an
// io.ReaderAt, io.WriterAt and io.Seeker. Its methods are safe for concurrent use.
type File struct {
	v      *Volume
	n      *node
	name   string
	flag   int
	offset int64
	closed bool
	// dirNext is the ReadDir position: the content offset to continue from.
	dirNext int
}

var errFileClosed = fs.ErrClosed

func (f *File) check(op string, write bool) error {
	if f.closed {
		return pathErr(op, f.name, errFileClosed)
	}
	if err := f.v.usable(); err != nil {
		return pathErr(op, f.name, err)
	}
	if write && f.flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		return pathErr(op, f.name, syscall.EBADF)
	}
	if write && f.v.damage != nil {
		return pathErr(op, f.name, errReadOnly)
	}
	if write {
		if err := f.v.fence.err(); err != nil {
			return pathErr(op, f.name, err)
		}
	}
	if !write && f.flag&os.O_WRONLY != 0 {
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

// Name is the path the file was opened with.
func (f *File) Name() string { return f.name }

// Stat describes the file.
func (f *File) Stat() (fs.FileInfo, error) {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if f.closed {
		return nil, pathErr("stat", f.name, errFileClosed)
	}
	return f.n.info(f.name), nil
}

// ReadAt reads at off without moving the file offset.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	// Most reads change nothing, so they share the volume lock and wait for the device side
	// by side; a read that would load the chain or find it short (damage) takes it whole.
	f.v.mu.RLock()
	if err := f.check("read", false); err != nil {
		f.v.mu.RUnlock()
		return 0, err
	}
	if f.sharedRead(off) {
		defer f.v.mu.RUnlock()
		return f.readAt(p, off)
	}
	f.v.mu.RUnlock()
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	return f.readAt(p, off)
}

// sharedRead tells whether a read at off may run with the volume lock held for reading only: it
// may not when it would change the node (load its chain, or note damage when the chain is shorter
// than the size) or fail (a directory, a negative offset).
func (f *File) sharedRead(off int64) bool {
	n := f.n
	return !n.isDir() && off >= 0 && n.chainOK && n.chainBytes() >= int64(n.ent.Size)
}

func (f *File) readAt(p []byte, off int64) (int, error) {
	if f.n.isDir() {
		return 0, pathErr("read", f.name, syscall.EISDIR)
	}
	if off < 0 {
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	n, err := f.n.readAt(p, off)
	if err != nil {
		return n, pathErr("read", f.name, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Read reads from the file offset.
func (f *File) Read(p []byte) (int, error) {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	n, err := f.readAt(p, f.offset)
	f.offset += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// WriteAt writes at off without moving the file offset.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("write", f.name, syscall.EINVAL)
	}
	return f.writeAt(p, off)
}

func (f *File) writeAt(p []byte, off int64) (int, error) {
	if f.flag&os.O_APPEND != 0 {
		off = int64(f.n.ent.Size)
	}
	n, err := f.n.writeAt(p, off)
	err = f.v.finish(err)
	if err != nil {
		return n, pathErr("write", f.name, err)
	}
	return n, nil
}

// Write writes at the file offset (at the end with O_APPEND).
func (f *File) Write(p []byte) (int, error) {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		f.offset = int64(f.n.ent.Size)
	}
	n, err := f.writeAt(p, f.offset)
	f.offset += int64(n)
	return n, err
}

// Seek sets the file offset, as io.Seeker.
func (f *File) Seek(offset int64, whence int) (int64, error) {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if f.closed {
		return 0, pathErr("seek", f.name, errFileClosed)
	}
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.offset
	case io.SeekEnd:
		offset += int64(f.n.ent.Size)
	default:
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	if offset < 0 {
		return 0, pathErr("seek", f.name, syscall.EINVAL)
	}
	f.offset = offset
	if f.n.isDir() && offset == 0 {
		f.dirNext = 0
	}
	return offset, nil
}

// Truncate sets the file's size.
func (f *File) Truncate(size int64) error {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if err := f.check("truncate", true); err != nil {
		return err
	}
	return pathErr2("truncate", f.name, f.v.finish(f.n.truncate(size)))
}

// Fallocate allocates clusters for [off, off+length), in one contiguous run when there is one.
// With keepSize the file's size does not change, as FALLOC_FL_KEEP_SIZE.
func (f *File) Fallocate(off, length int64, keepSize bool) error {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if err := f.check("fallocate", true); err != nil {
		return err
	}
	return pathErr2("fallocate", f.name, f.v.finish(f.n.fallocate(off, length, keepSize)))
}

// Sync makes the file's data and metadata durable.
func (f *File) Sync() error {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if err := f.check("sync", false); err != nil && !errors.Is(err, syscall.EBADF) {
		return err
	}
	return pathErr2("sync", f.name, f.v.syncLocked())
}

// Close releases the handle. The last close of a removed file frees its clusters.
func (f *File) Close() error {
	f.v.mu.Lock()
	defer f.v.endOp()
	if f.closed {
		return pathErr("close", f.name, errFileClosed)
	}
	f.closed = true
	n := f.n
	var err error
	if f.flag&(os.O_WRONLY|os.O_RDWR) != 0 && !n.unlinked && f.v.writable() == nil {
		err = n.padTail()
	}
	if err == nil && f.v.opts.Flush && f.flag&(os.O_WRONLY|os.O_RDWR) != 0 && !f.v.opts.ReadOnly {
		if f.v.opts.FlushNoWait {
			go f.v.flushNodeLater(n)
		} else {
			err = f.v.flushNode(n)
		}
	}
	n.refs--
	if n.refs == 0 && !f.v.closed {
		if n.unlinked {
			err = f.v.finish(n.freeClusters())
		} else if !n.isRoot() {
			err = f.v.finish(n.trimPrealloc())
			n.parent.dir.forget(n)
		}
	}
	return pathErr2("close", f.name, err)
}

// Reopen opens the file f is open on once more, with flag (os.O_RDONLY, O_WRONLY, O_RDWR and
// O_APPEND; O_CREATE, O_EXCL and O_TRUNC make no sense here): by reference, not by path, so it
// reaches the same file after a rename or after its removal, as open(2) of /proc/self/fd/N does.
// The file's clusters stay until the last of its handles is closed.
func (f *File) Reopen(flag int) (*File, error) {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if f.closed {
		return nil, pathErr("open", f.name, errFileClosed)
	}
	if err := f.v.usable(); err != nil {
		return nil, pathErr("open", f.name, err)
	}
	if flag&(os.O_CREATE|os.O_EXCL|os.O_TRUNC) != 0 {
		return nil, pathErr("open", f.name, syscall.EINVAL)
	}
	if flag&writeFlags != 0 {
		if err := f.v.writable(); err != nil {
			return nil, pathErr("open", f.name, err)
		}
		if f.n.isDir() {
			return nil, pathErr("open", f.name, syscall.EISDIR)
		}
	}
	f.n.refs++
	return &File{v: f.v, n: f.n, name: f.name, flag: flag}, nil
}

// ReadDir reads the directory's entries in directory order, as fs.ReadDirFile: with count > 0 at
// most count entries and io.EOF at the end, with count <= 0 all that are left.
func (f *File) ReadDir(count int) ([]fs.DirEntry, error) {
	f.v.mu.Lock()
	defer f.v.endOp()
	if err := f.check("readdir", false); err != nil {
		return nil, err
	}
	if !f.n.isDir() {
		return nil, pathErr("readdir", f.name, syscall.ENOTDIR)
	}
	d, err := f.n.loadDir()
	if err != nil {
		return nil, pathErr("readdir", f.name, err)
	}
	var out []fs.DirEntry
	for off := range d.offsetsFrom(f.dirNext) {
		if count > 0 && len(out) == count {
			break
		}
		out = append(out, dirEntry{d.entryInfo(off)})
		f.dirNext = off + 1
	}
	if count > 0 && len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

// flushNode writes back a file's dirty data and the metadata that goes with it: the close-time
// writeback of vfat's flush option, so a large copy leaves in a few large requests as soon as it
// is closed instead of waiting for the background writer.
func (v *Volume) flushNode(n *node) error {
	if n.unlinked {
		return nil
	}
	if _, err := n.extents(); err != nil {
		return err
	}
	for _, r := range n.devRanges(0, int64(n.clusterCount())*int64(v.geo.ClusterSize)) {
		if err := v.writebackRange(r.off, r.length); err != nil {
			return fmt.Errorf("%s: %w", n.path(), err)
		}
	}
	// The entry goes too, so the file is on the disk once closed; the order puts a flush before
	// it. FSINFO is a hint and waits for the next full writeback: one request less per close.
	return v.writebackMeta(false, false)
}

// flushNodeLater is flushNode for a close that does not wait.
func (v *Volume) flushNodeLater(n *node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	if err := v.flushNode(n); err != nil {
		v.opts.Logger.Error("fatvol: close-time writeback failed", "device", v.name, "file", n.path(), "err", err)
	}
}

// Chtimes sets the file's times, as futimens: it works on a removed file too.
func (f *File) Chtimes(atime, mtime time.Time) error {
	return f.change("chtimes", func(n *node) error { return n.chtimes(atime, mtime) })
}

// SetAttributes sets the file's read-only, hidden, system and archive bits, as fchmod.
func (f *File) SetAttributes(attr uint8) error {
	return f.change("chattr", func(n *node) error { return n.setAttributes(attr) })
}

func (f *File) change(op string, fn func(*node) error) error {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	if f.closed {
		return pathErr(op, f.name, errFileClosed)
	}
	if err := f.v.writable(); err != nil {
		return pathErr(op, f.name, err)
	}
	if f.n.isRoot() {
		return pathErr(op, f.name, syscall.EPERM)
	}
	err := fn(f.n)
	if err == nil {
		f.n.storeEntry()
	}
	return pathErr2(op, f.name, f.v.finish(err))
}
