package fatfuse

import (
	"context"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatvol"
)

// dirHandle is an open directory: its listing in directory order, as vfat's readdir gives it,
// read once per open (and again after a rewind).
type dirHandle struct {
	srv *Server
	n   *node
	f   *fatvol.File

	mu      sync.Mutex
	loaded  bool
	entries []fuse.DirEntry
	infos   map[string]fs.FileInfo
	next    int
}

// OpendirHandle opens directory n for reading.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	n.srv.ns.RLock()
	defer n.srv.ns.RUnlock()
	p, ok := n.path()
	if !ok {
		return nil, 0, syscall.ENOENT
	}
	f, err := n.srv.vol.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		return nil, 0, n.srv.errno(err)
	}
	return &dirHandle{srv: n.srv, n: n, f: f}, 0, 0
}

func (d *dirHandle) engineFile() *fatvol.File { return d.f }

// load reads the listing, with "." and ".." first as vfat shows them (the root too).
func (d *dirHandle) load() syscall.Errno {
	s := d.srv
	if _, err := d.f.Seek(0, io.SeekStart); err != nil {
		return s.errno(err)
	}
	list, err := d.f.ReadDir(-1)
	if err != nil {
		return s.errno(err)
	}
	s.mu.Lock()
	parentIno := d.n.ino
	if d.n.parent != nil {
		parentIno = d.n.parent.ino
	}
	s.mu.Unlock()
	d.entries = append(d.entries[:0],
		fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: d.n.ino, Off: 1},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: parentIno, Off: 2})
	d.infos = make(map[string]fs.FileInfo, len(list))
	for _, e := range list {
		fi, err := e.Info()
		if err != nil {
			return s.errno(err)
		}
		mode := uint32(syscall.S_IFREG)
		if fi.IsDir() {
			mode = syscall.S_IFDIR
		}
		d.entries = append(d.entries, fuse.DirEntry{
			Name: fi.Name(),
			Mode: mode,
			Ino:  s.inoOf(fi.Sys().(*fatvol.Attr).Pos),
			Off:  uint64(len(d.entries) + 1),
		})
		d.infos[fi.Name()] = fi
	}
	d.loaded = true
	return 0
}

// Readdirent returns the next entry, nil at the end.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.loaded {
		if e := d.load(); e != 0 {
			return nil, e
		}
	}
	if d.next >= len(d.entries) {
		return nil, 0
	}
	e := d.entries[d.next]
	d.next++
	return &e, 0
}

// Seekdir continues after the entry whose Off is off; 0 rewinds and reads the directory anew.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == 0 {
		d.loaded, d.next = false, 0
		return 0
	}
	d.next = int(min(off, uint64(len(d.entries))))
	return 0
}

// Lookup serves readdirplus from the listing just read, without walking the path again.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	d.mu.Lock()
	fi := d.infos[name]
	d.mu.Unlock()
	if fi == nil {
		return d.n.Lookup(ctx, name, out)
	}
	return d.srv.entry(ctx, d.n, fi, out), 0
}

// Releasedir closes the directory.
func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) { d.f.Close() }

// Fsyncdir writes the volume back.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.srv.settle() // so a removal just before is durable with its clusters freed
	return d.srv.errno(d.srv.vol.Sync())
}

var (
	_ gofs.NodeOpendirHandler = (*node)(nil)
	_ gofs.FileReaddirenter   = (*dirHandle)(nil)
	_ gofs.FileSeekdirer      = (*dirHandle)(nil)
	_ gofs.FileLookuper       = (*dirHandle)(nil)
	_ gofs.FileReleasedirer   = (*dirHandle)(nil)
	_ gofs.FileFsyncdirer     = (*dirHandle)(nil)
)
