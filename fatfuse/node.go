package fatfuse

import (
	"context"
	"io/fs"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/csi-fat/csi-fat/fatvol"
)

// node is one file or directory the kernel knows. Its place (parent and stored name) is kept
// here rather than taken from go-fuse's tree: a case-insensitive lookup ("foo" for "Foo") adds
// a second name for the same inode there, and the engine needs the one that exists.
type node struct {
	gofs.Inode
	srv *Server

	// Guarded by srv.mu.
	parent   *node
	name     string // as stored on the volume
	pos      int64  // device offset of the entry (Attr.Pos); 0 for the root
	ino      uint64 // fixed for the node's life
	unlinked bool
	subdirs  int    // cached count of subdirectories, -1 when unknown
	version  uint64 // counts changes of a directory's entries, to keep a stale count out
	// aliases are other spellings ("foo" for "Foo") the kernel has cached for this entry.
	aliases []alias
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
		if p.unlinked {
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

// identify returns the node for the entry at pos, making one if none is known: the same entry
// always meets the same node, so the kernel sees one inode however it is reached.
func (s *Server) identifyLocked(pos int64) *node {
	if c := s.byPos[pos]; c != nil {
		return c
	}
	ino := uint64(pos)
	if s.byIno[ino] != nil || ino <= 1 {
		// A renamed node still holds this number.
		ino = s.nextIno
		s.nextIno++
	}
	c := &node{srv: s, pos: pos, ino: ino, subdirs: -1}
	s.byPos[pos] = c
	s.byIno[ino] = c
	return c
}

// inoOf is the inode number readdir reports for the entry at pos.
func (s *Server) inoOf(pos int64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identifyLocked(pos).ino
}

// childInode returns the kernel inode for fi, found inside directory parent, and fills out.
func (s *Server) childInode(ctx context.Context, parent *node, fi fs.FileInfo) *gofs.Inode {
	a := fi.Sys().(*fatvol.Attr)
	s.mu.Lock()
	c := s.identifyLocked(a.Pos)
	c.parent, c.name = parent, fi.Name()
	s.mu.Unlock()
	mode := uint32(syscall.S_IFREG)
	if fi.IsDir() {
		mode = syscall.S_IFDIR
	}
	in := parent.NewInode(ctx, c, gofs.StableAttr{Mode: mode, Ino: c.ino})
	if got, ok := in.Operations().(*node); ok && got != c {
		// go-fuse already had a node with this identity; keep that one.
		s.mu.Lock()
		got.parent, got.name, got.pos, got.unlinked = parent, fi.Name(), a.Pos, false
		s.byPos[a.Pos] = got
		s.byIno[got.ino] = got
		if s.byIno[c.ino] == c {
			delete(s.byIno, c.ino)
		}
		s.mu.Unlock()
	}
	return in
}

// OnForget drops the node from the tables once the kernel has forgotten it.
func (n *node) OnForget() {
	s := n.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byPos[n.pos] == n {
		delete(s.byPos, n.pos)
	}
	if s.byIno[n.ino] == n && n != s.root {
		delete(s.byIno, n.ino)
	}
}

// removedLocked records that the entry at pos is gone.
func (s *Server) removedLocked(pos int64) []alias {
	c := s.byPos[pos]
	if c == nil {
		return nil
	}
	c.unlinked = true
	delete(s.byPos, pos)
	return s.takeAliasesLocked(c)
}

// movedLocked records that node c's entry now lives at pos under parent with the stored name.
func (s *Server) movedLocked(c *node, parent *node, name string, pos int64) {
	if s.byPos[c.pos] == c {
		delete(s.byPos, c.pos)
	}
	c.parent, c.name, c.pos, c.unlinked = parent, name, pos, false
	s.byPos[pos] = c
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
func forgetAliases(aliases []alias) {
	if len(aliases) == 0 {
		return
	}
	go func() {
		for _, a := range aliases {
			a.dir.NotifyEntry(a.name)
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

var (
	_ gofs.NodeOnForgetter = (*node)(nil)
	_ gofs.NodeLookuper    = (*node)(nil)
)
