package fatvol

import "time"

// The directories in memory. A directory read stays in memory while something needs it and,
// beyond that, while the directories held fit in Options.DirCacheBytes: at the end of an
// operation past the bound, those nothing needs go, least recently used first, and are read
// again from the medium when next used. Nothing needs a directory that
//
//   - is not the root and has no open handle,
//   - has no loaded directory and no open file in it (so every node in memory keeps its parent
//     chain, and every path to an entry meets the same node),
//   - has nothing to write back and no write whose order waits on it (a name crossing sectors,
//     a rename mark to clear).
//
// What is written back is what the medium then holds, so a directory read again has the same
// entries at the same places: the same names, attributes and positions (Attr.Pos, which names a
// file across mounts). Its entries' claims on clusters (damage.go) go with it: a cross-link
// between an entry of a dropped directory and one read later goes unnoticed by the engine (fsck
// finds it); a directory looping back to an ancestor does not, as ancestors stay loaded.

// dirEntryBytes is what a directory in memory holds for each entry beside its raw bytes: its
// slot, its name and folded name, the maps from names and short names. Measured at 160-321 bytes
// a file with a long name, as the maps fill and grow (TestDirCacheEntryBytes).
const dirEntryBytes = 320

// dirBaseBytes is what a directory in memory holds whatever its size: its node, its content,
// its maps.
const dirBaseBytes = 1 << 10

// dirCache lists the directories in memory, most recently used first, and what they hold.
type dirCache struct {
	newest, oldest *dirContent
	bytes          int64 // sum of their cost
	count          int
}

// memoryCost is what the directory holds in memory, about.
func (d *dirContent) memoryCost() int64 {
	return dirBaseBytes + int64(cap(d.buf)) + int64(len(d.slots))*dirEntryBytes + int64(cap(d.claimed))*4
}

// used puts d first in the list (adding it when new) and accounts for its current size.
func (c *dirCache) used(d *dirContent) {
	if c.newest == d {
		c.account(d)
		return
	}
	if d.listed {
		c.unlink(d)
	}
	d.listed = true
	d.older, d.newer = c.newest, nil
	if c.newest != nil {
		c.newest.newer = d
	}
	c.newest = d
	if c.oldest == nil {
		c.oldest = d
	}
	c.count++
	c.account(d)
}

func (c *dirCache) account(d *dirContent) {
	cost := d.memoryCost()
	c.bytes += cost - d.cost
	d.cost = cost
}

// unlink takes d out of the list.
func (c *dirCache) unlink(d *dirContent) {
	if d.newer != nil {
		d.newer.older = d.older
	} else {
		c.newest = d.older
	}
	if d.older != nil {
		d.older.newer = d.newer
	} else {
		c.oldest = d.newer
	}
	d.newer, d.older, d.listed = nil, nil, false
	c.count--
}

// trimScan is how many directories one trim looks at, at most: those still needed go to the
// front, so a trim costs the same however many are loaded.
const trimScan = 64

// trimDirs drops directories nothing needs, oldest first, until those in memory fit the bound.
// Only at the end of an operation: none of the operation's pointers may outlive it.
func (v *Volume) trimDirs() {
	c := &v.dirs
	for seen, look := 0, min(trimScan, c.count); c.bytes > v.opts.DirCacheBytes && seen < look && c.oldest != nil; seen++ {
		d := c.oldest
		if !v.dirDroppable(d) {
			c.used(d)
			continue
		}
		v.dropDir(d)
	}
}

// dirDroppable tells whether nothing needs d in memory.
func (v *Volume) dirDroppable(d *dirContent) bool {
	n := d.n
	if n.isRoot() || n.refs > 0 {
		return false
	}
	if _, dirty := v.dirtyDirs[d]; dirty {
		return false
	}
	for _, c := range d.children {
		if c.isDir() || c.refs > 0 {
			return false
		}
	}
	for _, c := range v.order.crossings {
		if c.d == d {
			return false
		}
	}
	for at := range v.order.marks {
		if at.d == d {
			return false
		}
	}
	return true
}

// dropDir takes d out of memory: its node leaves its parent's loaded children (a later lookup
// reads the entry again), and the claims its entries made go.
func (v *Volume) dropDir(d *dirContent) {
	n := d.n
	for _, cl := range d.claimed {
		if owner, ok := v.claims[cl]; ok && owner.parent == n {
			delete(v.claims, cl)
			v.fat.unmarkFresh(cl) // the entry may have moved to a directory still loaded
		}
	}
	// What the directory and its entries hold is on the medium as it is in memory: clusters
	// allocated since open that they point at are no longer a sign of a dangling entry when
	// read again (claim).
	for _, e := range n.ext {
		for c := e.start; c < e.start+e.count; c++ {
			v.fat.unmarkFresh(c)
		}
	}
	for off := range d.slots {
		e := d.entry(off)
		if c := e.Cluster(v.geo.Type); v.fat.isData(c) {
			v.fat.unmarkFresh(c)
		}
	}
	if p := n.parent; p != nil && p.dir != nil && p.dir.children[n.off] == n {
		delete(p.dir.children, n.off)
	}
	v.dirs.unlink(d)
	v.dirs.bytes -= d.cost
	n.dir = nil
}

// DirCache is what the directories in memory hold: how many, and their bytes, about.
type DirCache struct {
	Dirs  int
	Bytes int64
}

// DirCache reports the directories the volume holds in memory.
func (v *Volume) DirCache() DirCache {
	v.mu.Lock()
	defer v.mu.Unlock()
	return DirCache{Dirs: v.dirs.count, Bytes: v.dirs.bytes}
}

// endOp ends an operation that may have read directories: past the bound, those nothing needs
// go, then the volume is unlocked.
func (v *Volume) endOp() {
	if v.dirs.bytes > v.opts.DirCacheBytes {
		v.trimDirs()
	}
	if v.dirs.bytes > 2*v.opts.DirCacheBytes && len(v.dirtyDirs) > 0 && v.flusher != nil {
		// What holds the directories past their bound waits to be written back (many written
		// at once): the background writer writes everything at its next tick rather than
		// after DirtyExpire, and they can go.
		v.dirtySince = time.Now().Add(-v.opts.DirtyExpire)
	}
	v.mu.Unlock()
}
