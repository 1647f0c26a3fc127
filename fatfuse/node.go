package fatfuse

import (
	"log"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatvol"
)

// node is one file or directory the kernel knows. Its FUSE node ID is its inode number: the
// device position of its entry when it was first known, or a synthetic number above 1<<62 when a
// renamed node held that position's number. Both are kept in the state file (state.go), so a
// server taking the connection over names the same files by the same IDs.
type node struct {
	srv   *Server
	ino   uint64 // fixed for the node's life, and its node ID
	gen   uint64 // tells this node from an earlier one of the same number
	isDir bool

	// Guarded by srv.mu.
	parent   *node
	name     string // as stored on the volume
	pos      int64  // device offset of the entry (Attr.Pos); 0 for the root
	lookups  uint64 // the kernel's references: entries it was given less those it forgot
	unlinked bool
	// lost: after a crash, the state named an entry the volume does not have (a change that was
	// never written back); its requests fail with EIO rather than reach another file.
	lost bool
	// lostChanges: a directory in which such a change was lost; its next FSYNCDIR fails with
	// EIO, once, so an application that renamed or created before the crash and syncs the
	// directory after it learns that the change is not there.
	lostChanges bool
	// anchor holds the engine's file once its entry went (unlink, rename over it) while the
	// kernel still knows the inode: FUSE's node lives until the kernel forgets it, and an open
	// of it (/proc/self/fd/N, or a path walk that found it just before a rename over it) must
	// reach the same file, as on a local file system. forget closes it; the file's clusters
	// go at that close or the last handle's, whichever comes later.
	anchor  *fatvol.File
	subdirs int    // cached count of subdirectories, -1 when unknown
	version uint64 // counts changes of a directory's entries, to keep a stale count out
	// moves counts removals and renames in a directory: entries that may have left the places
	// a listing read before found them at (readdir.go).
	moves uint64
	// aliases are other spellings ("foo" for "Foo") the kernel has cached for this entry.
	aliases []alias
	// used: looked up since the pruner last passed it (budget.go).
	used atomic.Bool
}

// alias is a name in a directory that the kernel resolved to a node case-insensitively.
type alias struct {
	dir  *node
	name string
}

// path is the engine path of the node ("." for the root), false once it was removed.
func (n *node) path() (string, bool) {
	n.srv.mu.Lock()
	defer n.srv.mu.Unlock()
	return n.pathLocked()
}

func (n *node) pathLocked() (string, bool) {
	if n.parent == nil {
		return ".", !n.unlinked
	}
	var parts []string
	for p := n; p.parent != nil; p = p.parent {
		if p.unlinked || p.lost {
			return "", false
		}
		parts = append(parts, p.name)
	}
	size := len(parts) - 1
	for _, s := range parts {
		size += len(s)
	}
	b := make([]byte, 0, size)
	for i := len(parts) - 1; i >= 0; i-- {
		b = append(b, parts[i]...)
		if i > 0 {
			b = append(b, '/')
		}
	}
	return string(b), true
}

// childPath is the engine path of name inside directory n.
func (n *node) childPath(name string) (string, syscall.Errno) {
	p, ok := n.path()
	if !ok {
		return "", syscall.ENOENT
	}
	if p == "." {
		return name, 0
	}
	return p + "/" + name, 0
}

// node resolves a node ID the kernel sent; nil when no node has it.
func (s *Server) node(id uint64) *node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byIno[id]
}

// identifyLocked returns the node for the entry at pos, making one if none is known: the same
// entry always meets the same node, so the kernel sees one inode however it is reached.
func (s *Server) identifyLocked(pos int64, isDir bool) *node {
	if c := s.byPos[pos]; c != nil {
		return c
	}
	ino := uint64(pos)
	if s.byIno[ino] != nil || ino <= fuse.FUSE_ROOT_ID {
		// A renamed node still holds this number.
		ino = s.nextIno
		s.nextIno++
	}
	s.nextGen++
	c := &node{srv: s, pos: pos, ino: ino, gen: s.nextGen, isDir: isDir, subdirs: -1}
	s.byPos[pos] = c
	s.byIno[ino] = c
	s.overBudgetLocked()
	return c
}

// inoOf is the inode number readdir reports for the entry at pos. An entry no node has is not
// given one: a plain readdir makes no inode in the kernel, so such a node would never be
// forgotten; the entry's position is the number its node gets when it is looked up, unless a
// renamed node holds that number, and then the entry needs a node of its own now.
func (s *Server) inoOf(pos int64, isDir bool) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.byPos[pos]; c != nil {
		return c.ino
	}
	if ino := uint64(pos); ino > fuse.FUSE_ROOT_ID && s.byIno[ino] == nil {
		return ino
	}
	c := s.identifyLocked(pos, isDir)
	s.saveNodeLocked(c)
	return c.ino
}

// lookedUp returns the node for fi, found in directory parent, counting the kernel's new
// reference to it: every entry a reply hands the kernel is one FORGET to come.
func (s *Server) lookedUp(parent *node, fi os.FileInfo) *node {
	a := fi.Sys().(*fatvol.Attr)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.identifyLocked(a.Pos, fi.IsDir())
	c.parent, c.name = parent, fi.Name()
	c.lookups++
	c.used.Store(true)
	s.saveNodeLocked(c)
	return c
}

// forget drops n of the kernel's references to node id; at none the node goes, and with it a
// removed file: nothing can open it any more.
func (s *Server) forget(id, n uint64) {
	s.mu.Lock()
	c := s.byIno[id]
	if c == nil || c == s.root {
		s.mu.Unlock()
		return
	}
	c.lookups -= min(n, c.lookups)
	if c.lookups > 0 {
		s.saveNodeLocked(c)
		s.mu.Unlock()
		return
	}
	if s.byPos[c.pos] == c {
		delete(s.byPos, c.pos)
	}
	delete(s.byIno, c.ino)
	s.saveGoneLocked(c.ino)
	s.tidyLocked()
	a := c.anchor
	c.anchor = nil
	s.mu.Unlock()
	closeAnchor(a)
	s.mu.Lock()
	delete(s.fresh, c) // after the close: settle waits for the clusters, not just the call
	s.mu.Unlock()
}

// closeAnchor closes a removed file's anchor; its last close frees the file's clusters.
func closeAnchor(f *fatvol.File) {
	if f == nil {
		return
	}
	if err := f.Close(); err != nil {
		log.Printf("fatfuse: releasing removed file %s: %v", f.Name(), err)
	}
}

// anchorFor opens the file at path p, which is about to be removed, when the kernel knows its
// node (pos is its entry); nil otherwise, and for directories. The caller holds s.ns for
// writing.
func (s *Server) anchorFor(p string, pos int64, isDir bool) (*fatvol.File, error) {
	s.mu.Lock()
	known := s.byPos[pos] != nil
	s.mu.Unlock()
	if isDir || !known {
		return nil, nil
	}
	return s.vol.OpenFile(p, os.O_RDONLY, 0)
}

// removedLocked records that the entry at pos is gone; anchor, if any, keeps the file for the
// node. What is not needed is returned, for the caller to close.
func (s *Server) removedLocked(pos int64, anchor *fatvol.File) (stale []alias, unused *fatvol.File) {
	c := s.byPos[pos]
	if c == nil {
		return nil, anchor
	}
	c.unlinked = true
	if anchor != nil {
		unused, c.anchor = c.anchor, anchor
		s.fresh[c] = time.Now()
	}
	delete(s.byPos, pos)
	s.saveNodeLocked(c)
	s.tidyLocked()
	return s.takeAliasesLocked(c), unused
}

// Go maps never give back the room their deleted entries took: a table keeps the size of the
// most nodes it ever held (a fast walk runs ahead of the pruner), and one that keeps taking new
// keys as it loses old ones grows further, since a part of it filled with deleted slots splits
// in two rather than reuse them. Under a node budget a walk makes and forgets a node for every
// file it visits, each with a new inode number and position, so the tables would follow the
// files walked, not the nodes held. They are copied afresh whenever as many entries went since
// the last copy as they hold (at least tidyFloor): about one insertion more per deletion.
const tidyFloor = 4096

// tidyLocked counts a deletion from byPos or byIno and copies the tables when they are due; the
// caller holds s.mu and iterates over neither.
func (s *Server) tidyLocked() {
	s.dropped++
	if s.dropped < max(tidyFloor, len(s.byIno)) {
		return
	}
	s.dropped = 0
	s.byIno = copyTable(s.byIno)
	s.byPos = copyTable(s.byPos)
}

// copyTable is a new map holding what m holds, sized for it alone.
func copyTable[K comparable](m map[K]*node) map[K]*node {
	c := make(map[K]*node, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// forgetWait bounds how long statfs and an allocation that ran out of space wait for the kernel
// to forget files removed just before. The kernel queues the FORGET of an inode nothing else
// holds before unlink(2) returns, so it arrives within moments; a file still open is not
// waited for past this.
const forgetWait = 50 * time.Millisecond

// settle waits until the files removed within forgetWait are forgotten by the kernel (their
// anchors closed) or that time has passed, so the space of "rm big; df" or "rm big; write" is
// back as on a local file system, although FUSE forgets inodes asynchronously.
func (s *Server) settle() {
	for {
		s.mu.Lock()
		now, waiting := time.Now(), false
		for c, t := range s.fresh {
			if now.Sub(t) >= forgetWait {
				delete(s.fresh, c)
			} else {
				waiting = true
			}
		}
		s.mu.Unlock()
		if !waiting {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// retryNoSpace runs op, and once more after settle when it ran out of space while removed files
// were still to be forgotten.
func (s *Server) retryNoSpace(op func() error) error {
	err := op()
	if fatvol.Errno(err) == syscall.ENOSPC {
		s.mu.Lock()
		pending := len(s.fresh) > 0
		s.mu.Unlock()
		if pending {
			s.settle()
			err = op()
		}
	}
	return err
}

// opened returns an engine file for node n, opened with flag: through the anchor once the file
// was removed, else by its path, with the namespace held still so the path names n's own entry.
func (n *node) opened(flag int) (*fatvol.File, syscall.Errno) {
	s := n.srv
	s.ns.RLock()
	defer s.ns.RUnlock()
	s.mu.Lock()
	a := n.anchor
	p, linked := n.pathLocked()
	lost := n.lost || (n.unlinked && a == nil && !n.isDir)
	s.mu.Unlock()
	var f *fatvol.File
	var err error
	switch {
	case a != nil:
		f, err = a.Reopen(flag)
	case lost:
		// Removed while open under a server that ended, or a change the volume never got:
		// its file cannot be found again, and no other file may answer for it.
		return nil, syscall.EIO
	case !linked:
		err = syscall.ENOENT // a removed directory
	default:
		f, err = s.vol.OpenFile(p, flag, 0)
	}
	if err != nil {
		return nil, s.errno(err)
	}
	return f, 0
}

// movedLocked records that node c's entry now lives at pos under parent with the stored name.
func (s *Server) movedLocked(c *node, parent *node, name string, pos int64) {
	if s.byPos[c.pos] == c {
		delete(s.byPos, c.pos)
	}
	c.parent, c.name, c.pos, c.unlinked = parent, name, pos, false
	s.byPos[pos] = c
	s.saveNodeLocked(c)
	s.tidyLocked()
}

// addAlias remembers that the kernel now caches name in dir for c.
func (s *Server) addAlias(c *node, dir *node, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range c.aliases {
		if a.dir == dir && a.name == name {
			return
		}
	}
	c.aliases = append(c.aliases, alias{dir, name})
}

// takeAliasesLocked returns and forgets the aliases of the given nodes (nil ones skipped).
func (s *Server) takeAliasesLocked(nodes ...*node) []alias {
	var out []alias
	for _, c := range nodes {
		if c != nil {
			out = append(out, c.aliases...)
			c.aliases = nil
		}
	}
	return out
}

// forgetAliases tells the kernel to drop cached spellings of entries that moved or went away;
// vfat's d_revalidate does the same for its case-insensitive dentries. It runs after the
// request, since the kernel holds the directory's lock until we answer.
func (s *Server) forgetAliases(aliases []alias) {
	if len(aliases) == 0 {
		return
	}
	go func() {
		for _, a := range aliases {
			s.fuse.EntryNotify(a.dir.ino, a.name)
		}
	}()
}

// dirChanged forgets a directory's subdirectory count after its entries changed.
func (n *node) dirChanged() {
	n.srv.mu.Lock()
	n.subdirs = -1
	n.version++
	n.srv.mu.Unlock()
}
