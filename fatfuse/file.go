package fatfuse

import (
	"errors"
	"io"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// openFlags keeps the open(2) flags the engine acts on. O_TRUNC is not among them: without
// atomic_o_trunc the kernel truncates through setattr.
func openFlags(flags uint32) int {
	return int(flags) & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR | os.O_APPEND)
}

// open opens file n.
func (n *node) open(flags uint32, out *fuse.OpenOut) syscall.Errno {
	s := n.srv
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		if e := s.writable(); e != 0 {
			return e
		}
	}
	f, e := n.opened(openFlags(flags))
	if e != 0 {
		return e
	}
	h := s.addHandle(n, f, flags, false)
	out.Fh, out.OpenFlags = h.fh, openReply
	return 0
}

// openReply are the flags of every file open's answer. KEEP_CACHE: the engine is the only
// writer and every write passes the kernel's page cache, so the cache stays valid from one open
// to the next. NOFLUSH: close(2) sends no FLUSH, a round trip per file that had nothing to do;
// writeback under the flush option happens at the engine's close of the file (Release), as vfat's
// at the last release.
const openReply = fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH

// read reads at off; short at the end of the file.
func (h *handle) read(dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f, e := h.file()
	if e != 0 {
		return nil, e
	}
	n, err := f.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, h.srv.errno(err)
	}
	// A vector goes out with one writev; go-fuse would first try to splice a data result
	// (a pipe write, a splice to /dev/null and an ioctl per read, all wasted).
	return fuse.ReadResultVector([][]byte{dest[:n]}), 0
}

// write writes at off (at the end under O_APPEND, which the engine applies). A write the kernel
// sends again after a takeover goes to the offset it names even under O_APPEND: the dead server
// may have applied it already, and at that offset a second time changes nothing.
func (h *handle) write(data []byte, off int64, resent bool) (uint32, syscall.Errno) {
	if e := h.srv.writable(); e != 0 {
		return 0, e
	}
	if h.takeLostWrites() {
		return 0, syscall.EIO
	}
	f, e := h.file()
	if e != 0 {
		return 0, e
	}
	if resent && h.flags&syscall.O_APPEND != 0 {
		p, err := f.Reopen(os.O_WRONLY)
		if err != nil {
			return 0, h.srv.errno(err)
		}
		defer closeAnchor(p)
		f = p
	}
	// Under O_SYNC and O_DSYNC the write is durable before it is acknowledged (the kernel's
	// FSYNC after it comes later), so a crash loses nothing the handle was told was written.
	durable := h.flags&syscall.O_DSYNC != 0
	if !durable {
		defer h.writeStarts()()
	}
	var n int
	err := h.srv.retryNoSpace(func() error {
		var err error
		n, err = f.WriteAt(data, off)
		if n > 0 {
			return nil // a short write; the next one reports the error
		}
		return err
	})
	if err == nil && durable {
		err = f.Sync()
	}
	if err != nil {
		return 0, h.srv.errno(err)
	}
	return uint32(n), 0
}

// fsync makes the file durable.
func (h *handle) fsync() syscall.Errno {
	if h.takeLostWrites() {
		return syscall.EIO
	}
	f, e := h.file()
	if e != 0 {
		return e
	}
	return h.srv.errno(h.srv.syncVolume(f.Sync))
}

// flush answers close(2) where the kernel sends FLUSH (not for handles opened here, which ask
// it not to): only to report writes a crash lost.
func (h *handle) flush() syscall.Errno {
	if h.takeLostWrites() {
		return syscall.EIO
	}
	return 0
}

// release closes the handle; the last close of a removed file frees its clusters.
func (h *handle) release() {
	if err := h.close(); err != nil {
		h.srv.errno(err)
	}
}

// fallocate(2) modes vfat supports.
const fallocKeepSize = 0x1

// allocate reserves clusters, as vfat: mode 0 (grow, zero-filled) and FALLOC_FL_KEEP_SIZE only.
func (h *handle) allocate(off uint64, size uint64, mode uint32) syscall.Errno {
	if mode&^fallocKeepSize != 0 {
		return syscall.EOPNOTSUPP
	}
	if e := h.srv.writable(); e != 0 {
		return e
	}
	f, e := h.file()
	if e != 0 {
		return e
	}
	defer h.writeStarts()()
	return h.srv.errno(h.srv.retryNoSpace(func() error {
		return f.Fallocate(int64(off), int64(size), mode&fallocKeepSize != 0)
	}))
}
