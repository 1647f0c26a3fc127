package fatfuse

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// rawFS is go-fuse's view of the server: it turns the node IDs and file handles of each request
// into the server's nodes and handles and calls their operations. Every request passes the
// server's gate (pause.go). Requests the kernel sends again after a takeover carry resendBit in
// their unique number; the operations that are not idempotent are told so.
type rawFS struct {
	fuse.RawFileSystem
	s *Server
}

// resendBit marks a request the kernel sends a second time (FUSE_UNIQUE_RESEND).
const resendBit = 1 << 63

func resent(h *fuse.InHeader) bool { return h.Unique&resendBit != 0 }

func newRawFS(s *Server) *rawFS {
	return &rawFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), s: s}
}

func (r *rawFS) String() string { return "fatfuse" }

func (r *rawFS) Init(srv *fuse.Server) { r.s.fuse = srv }

// status turns an errno into go-fuse's status.
func status(e syscall.Errno) fuse.Status { return fuse.Status(e) }

// errUnknownID answers a request naming a node the server does not have, which the kernel can
// only name if a server answered before it recorded (never done) or its state was not kept.
const errUnknownID = fuse.Status(syscall.ESTALE)

// dirOf resolves a directory node ID.
func (r *rawFS) dirOf(id uint64) (*node, fuse.Status) {
	n := r.s.node(id)
	switch {
	case n == nil:
		return nil, errUnknownID
	case !n.isDir:
		return nil, fuse.Status(syscall.ENOTDIR)
	}
	return n, fuse.OK
}

func (r *rawFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer r.s.enter(h)()
	n, st := r.dirOf(h.NodeId)
	if !st.Ok() {
		return st
	}
	if name == "." || name == ".." {
		return fuse.ENOENT // the kernel resolves these itself; no export by handle
	}
	return status(n.lookup(name, out))
}

func (r *rawFS) Forget(id, nlookup uint64) {
	defer r.s.enter(nil)()
	r.s.forget(id, nlookup)
}

func (r *rawFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	n := r.s.node(in.NodeId)
	if n == nil {
		return errUnknownID
	}
	var h *handle
	if in.Flags()&fuse.FUSE_GETATTR_FH != 0 {
		h = r.s.handle(in.NodeId, in.Fh())
	}
	return status(n.getattr(h, out))
}

func (r *rawFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	n := r.s.node(in.NodeId)
	if n == nil {
		return errUnknownID
	}
	var h *handle
	if fh, ok := in.GetFh(); ok {
		if h = r.s.handle(in.NodeId, fh); h != nil && h.dir {
			h = nil
		}
	}
	return status(n.setattr(h, in, out))
}

func (r *rawFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	n, st := r.dirOf(in.NodeId)
	if !st.Ok() {
		return st
	}
	return status(n.mknod(name, in.Mode, resent(&in.InHeader), out))
}

func (r *rawFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	n, st := r.dirOf(in.NodeId)
	if !st.Ok() {
		return st
	}
	return status(n.mkdir(name, resent(&in.InHeader), out))
}

func (r *rawFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer r.s.enter(h)()
	n, st := r.dirOf(h.NodeId)
	if !st.Ok() {
		return st
	}
	return status(n.remove(name, false, resent(h)))
}

func (r *rawFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer r.s.enter(h)()
	n, st := r.dirOf(h.NodeId)
	if !st.Ok() {
		return st
	}
	return status(n.remove(name, true, resent(h)))
}

func (r *rawFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	n, st := r.dirOf(in.NodeId)
	if !st.Ok() {
		return st
	}
	np, st := r.dirOf(in.Newdir)
	if !st.Ok() {
		return st
	}
	return status(n.rename(oldName, np, newName, in.Flags, in.Unique))
}

// Link and Symlink fail as on vfat: FAT has neither hard nor symbolic links.
func (r *rawFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EPERM
}

func (r *rawFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EPERM
}

func (r *rawFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	n, st := r.dirOf(in.NodeId)
	if !st.Ok() {
		return st
	}
	return status(n.create(name, in.Flags, in.Mode, resent(&in.InHeader), out))
}

func (r *rawFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	n := r.s.node(in.NodeId)
	switch {
	case n == nil:
		return errUnknownID
	case n.isDir:
		return fuse.Status(syscall.EISDIR)
	}
	return status(n.open(in.Flags, out))
}

// fileOf resolves a file handle.
func (r *rawFS) fileOf(id, fh uint64) (*handle, fuse.Status) {
	h := r.s.handle(id, fh)
	switch {
	case h == nil:
		return nil, fuse.EBADF
	case h.dir:
		return nil, fuse.Status(syscall.EISDIR)
	}
	return h, fuse.OK
}

func (r *rawFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer r.s.enter(&in.InHeader)()
	h, st := r.fileOf(in.NodeId, in.Fh)
	if !st.Ok() {
		return nil, st
	}
	res, e := h.read(buf[:min(len(buf), int(in.Size))], int64(in.Offset))
	return res, status(e)
}

func (r *rawFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer r.s.enter(&in.InHeader)()
	h, st := r.fileOf(in.NodeId, in.Fh)
	if !st.Ok() {
		return 0, st
	}
	n, e := h.write(data, int64(in.Offset), resent(&in.InHeader))
	return n, status(e)
}

func (r *rawFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	h, st := r.fileOf(in.NodeId, in.Fh)
	if !st.Ok() {
		return fuse.OK // a handle released already
	}
	return status(h.flush())
}

func (r *rawFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	h, st := r.fileOf(in.NodeId, in.Fh)
	if !st.Ok() {
		return st
	}
	return status(h.fsync())
}

func (r *rawFS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	h, st := r.fileOf(in.NodeId, in.Fh)
	if !st.Ok() {
		return st
	}
	return status(h.allocate(in.Offset, in.Length, in.Mode))
}

func (r *rawFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer r.s.enter(&in.InHeader)()
	if h := r.s.dropHandle(in.Fh); h != nil {
		h.release()
	}
}

func (r *rawFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	n, st := r.dirOf(in.NodeId)
	if !st.Ok() {
		return st
	}
	return status(n.opendir(out))
}

// dirHandleOf resolves a directory handle.
func (r *rawFS) dirHandleOf(id, fh uint64) (*handle, fuse.Status) {
	h := r.s.handle(id, fh)
	switch {
	case h == nil:
		return nil, fuse.EBADF
	case !h.dir:
		return nil, fuse.Status(syscall.ENOTDIR)
	}
	return h, fuse.OK
}

func (r *rawFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	h, st := r.dirHandleOf(in.NodeId, in.Fh)
	if !st.Ok() {
		return st
	}
	return status(h.readdir(in.Offset, false, out))
}

func (r *rawFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	h, st := r.dirHandleOf(in.NodeId, in.Fh)
	if !st.Ok() {
		return st
	}
	return status(h.readdir(in.Offset, true, out))
}

func (r *rawFS) ReleaseDir(in *fuse.ReleaseIn) {
	defer r.s.enter(&in.InHeader)()
	if h := r.s.dropHandle(in.Fh); h != nil {
		h.release()
	}
}

func (r *rawFS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer r.s.enter(&in.InHeader)()
	n, st := r.dirOf(in.NodeId)
	if !st.Ok() {
		return st
	}
	return status(n.fsyncdir())
}

func (r *rawFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer r.s.enter(h)()
	return status(r.s.statfs(out))
}
