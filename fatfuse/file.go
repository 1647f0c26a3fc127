package fatfuse

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatvol"
)

// engineFile is a handle backed by an open engine file.
type engineFile interface{ engineFile() *fatvol.File }

// handle is an open file.
type handle struct {
	srv *Server
	f   *fatvol.File
}

func (h *handle) engineFile() *fatvol.File { return h.f }

// openFlags keeps the open(2) flags the engine acts on. O_TRUNC is not among them: without
// atomic_o_trunc the kernel truncates through setattr.
func openFlags(flags uint32) int {
	return int(flags) & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR | os.O_APPEND)
}

// Open opens file n.
func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	s := n.srv
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		if e := s.writable(); e != 0 {
			return nil, 0, e
		}
	}
	f, e := n.opened(openFlags(flags))
	if e != 0 {
		return nil, 0, e
	}
	return &handle{srv: s, f: f}, openReply, 0
}

// openReply are the flags of every file open's answer. KEEP_CACHE: the engine is the only
// writer and every write passes the kernel's page cache, so the cache stays valid from one open
// to the next. NOFLUSH: close(2) sends no FLUSH, a round trip per file that had nothing to do;
// writeback under the flush option happens at the engine's close of the file (Release), as vfat's
// at the last release.
const openReply = fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH

// Read reads at off; short at the end of the file.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.f.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, h.srv.errno(err)
	}
	// A vector goes out with one writev; go-fuse would first try to splice a data result
	// (a pipe write, a splice to /dev/null and an ioctl per read, all wasted).
	return fuse.ReadResultVector([][]byte{dest[:n]}), 0
}

// Write writes at off (at the end under O_APPEND, which the engine applies).
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if e := h.srv.writable(); e != 0 {
		return 0, e
	}
	var n int
	err := h.srv.retryNoSpace(func() error {
		var err error
		n, err = h.f.WriteAt(data, off)
		if n > 0 {
			return nil // a short write; the next one reports the error
		}
		return err
	})
	if err != nil {
		return 0, h.srv.errno(err)
	}
	return uint32(n), 0
}

// Fsync makes the file durable.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.srv.errno(h.f.Sync())
}

// Release closes the handle; the last close of a removed file frees its clusters.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	return h.srv.errno(h.f.Close())
}

// fallocate(2) modes vfat supports.
const fallocKeepSize = 0x1

// Allocate reserves clusters, as vfat: mode 0 (grow, zero-filled) and FALLOC_FL_KEEP_SIZE only.
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode&^fallocKeepSize != 0 {
		return syscall.EOPNOTSUPP
	}
	if e := h.srv.writable(); e != 0 {
		return e
	}
	return h.srv.errno(h.srv.retryNoSpace(func() error {
		return h.f.Fallocate(int64(off), int64(size), mode&fallocKeepSize != 0)
	}))
}

var (
	_ gofs.NodeOpener    = (*node)(nil)
	_ gofs.FileReader    = (*handle)(nil)
	_ gofs.FileWriter    = (*handle)(nil)
	_ gofs.FileFsyncer   = (*handle)(nil)
	_ gofs.FileReleaser  = (*handle)(nil)
	_ gofs.FileAllocater = (*handle)(nil)
)
