package fatfuse

import (
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatvol"
)

// listing is an open directory's entries in directory order, as vfat's readdir gives them, read
// once per open (and again after a rewind). An entry's offset is its index plus one, so a read
// at any offset the kernel names continues after that entry.
type listing struct {
	loaded  bool
	moves   uint64 // the directory's moves when it was read
	entries []fuse.DirEntry
	infos   map[string]fs.FileInfo
}

// opendir opens directory n for reading.
func (n *node) opendir(out *fuse.OpenOut) syscall.Errno {
	s := n.srv
	s.ns.RLock()
	defer s.ns.RUnlock()
	p, ok := n.path()
	if !ok {
		return syscall.ENOENT
	}
	f, err := s.vol.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		return s.errno(err)
	}
	h := s.addHandle(n, f, 0, true)
	out.Fh = h.fh
	return 0
}

// load reads the listing, with "." and ".." first as vfat shows them (the root too). The caller
// holds h.mu, and h.f is open.
func (h *handle) load() syscall.Errno {
	s := h.srv
	s.mu.Lock()
	moves := h.n.moves // before the read: a move during it makes the listing stale
	s.mu.Unlock()
	if _, err := h.f.Seek(0, io.SeekStart); err != nil {
		return s.errno(err)
	}
	list, err := h.f.ReadDir(-1)
	if err != nil {
		return s.errno(err)
	}
	s.mu.Lock()
	parentIno := h.n.ino
	if h.n.parent != nil {
		parentIno = h.n.parent.ino
	}
	s.mu.Unlock()
	l := &h.list
	l.moves = moves
	l.entries = append(l.entries[:0],
		fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: h.n.ino, Off: 1},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: parentIno, Off: 2})
	l.infos = make(map[string]fs.FileInfo, len(list))
	for _, e := range list {
		fi, err := e.Info()
		if err != nil {
			return s.errno(err)
		}
		mode := uint32(syscall.S_IFREG)
		if fi.IsDir() {
			mode = syscall.S_IFDIR
		}
		l.entries = append(l.entries, fuse.DirEntry{
			Name: fi.Name(),
			Mode: mode,
			Ino:  s.inoOf(fi.Sys().(*fatvol.Attr).Pos, fi.IsDir()),
			Off:  uint64(len(l.entries) + 1),
		})
		l.infos[fi.Name()] = fi
	}
	l.loaded = true
	return 0
}

// readdir fills out with the entries after offset off; 0 reads the directory anew. With plus
// (readdirplus) each entry but "." and ".." is handed to the kernel as a lookup would: from the
// listing, without walking the path again, unless an entry of the directory was removed or
// renamed since it was read, which may have moved the entry.
func (h *handle) readdir(off uint64, plus bool, out *fuse.DirEntryList) syscall.Errno {
	s := h.srv
	if _, e := h.file(); e != 0 { // a handle a previous server opened
		return e
	}
	if plus {
		s.ns.RLock() // no removal or rename while the listing's places are used
		defer s.ns.RUnlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if off == 0 || !h.list.loaded {
		if e := h.load(); e != 0 {
			return e
		}
	}
	s.mu.Lock()
	current := h.list.moves == h.n.moves
	s.mu.Unlock()
	for _, e := range h.list.entries[min(off, uint64(len(h.list.entries))):] {
		if !plus {
			if !out.AddDirEntry(e) {
				break
			}
			continue
		}
		eo := out.AddDirLookupEntry(e)
		if eo == nil {
			break
		}
		if e.Name == "." || e.Name == ".." {
			continue // the kernel ignores their entry data
		}
		if fi := h.list.infos[e.Name]; fi != nil && current {
			s.entry(h.n, fi, eo)
		} else if errno := h.n.lookupHeld(e.Name, eo); errno != 0 {
			*eo = fuse.EntryOut{} // gone since the listing was read: a plain entry
		}
	}
	return 0
}

// fsyncdir writes the volume back; after a crash that lost a change in directory n, it fails
// once with EIO instead (node.lostChanges).
func (n *node) fsyncdir() syscall.Errno {
	s := n.srv
	s.mu.Lock()
	lost := n.lostChanges
	if lost {
		n.lostChanges = false
		s.saveNodeLocked(n)
	}
	s.mu.Unlock()
	if lost {
		return syscall.EIO
	}
	s.settle() // so a removal just before is durable with its clusters freed
	return s.errno(s.syncVolume(s.vol.Sync))
}
