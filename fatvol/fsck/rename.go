package fsck

import (
	"fmt"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Interrupted renames. The engine writes a rename's new entry, marked with ondisk.RenameNew,
// before it removes the old one, and clears the mark once the removal is durable. A crash in
// between leaves two entries of one file: the same first cluster, size and attributes (and for an
// empty file, which has no cluster, the same time stamps), exactly one marked. That is not a
// cross-link: Check reports it as InterruptedRename, and Repair (and ResolveInterrupted, which the
// engine runs when it opens a volume that was not cleanly unmounted) keeps the marked, new name.
// fsck.fat knows nothing of the mark: it calls the two names files that share clusters.

// dotDot is a '..' entry that names another cluster than its directory's parent.
type dotDot struct {
	dir  int32
	off  int64
	got  uint32
	attr uint8
}

// renamePair tells whether file i, whose first cluster file o claimed, is o's other name in an
// interrupted rename, and records the pair: i is then not checked or descended into further.
func (c *checker) renamePair(i, o int32) bool {
	f, g := c.recs.at(i), c.recs.at(o)
	if o <= 0 || f.pair != 0 || g.pair != 0 || f.start != g.start || f.size != g.size || f.attr != g.attr || f.renameNew == g.renameNew {
		return false
	}
	c.pairUp(i, o)
	f.deleted = true
	return true
}

func (c *checker) pairUp(i, o int32) {
	c.recs.at(i).pair, c.recs.at(o).pair = o+1, i+1
	if c.recs.at(i).renameNew {
		c.pairs = append(c.pairs, [2]int32{i, o})
	} else {
		c.pairs = append(c.pairs, [2]int32{o, i})
	}
}

// pairEmptyFiles pairs the marked empty files (no cluster) with the one unmarked empty file that
// has the same attributes and time stamps, when there is exactly one. (Entries the check cut to
// nothing are not empty files.)
func (c *checker) pairEmptyFiles() {
	type key struct {
		size  uint32
		attr  uint8
		stamp [11]byte
	}
	empty := func(f *fileRec) bool {
		return f.start == 0 && f.size == 0 && !f.entryChanged && !f.isDir() && f.attr&ondisk.AttrVolumeID == 0
	}
	// The marked ones first: there are none but after a crash in a rename, and only their keys
	// are looked for among the rest, so a volume of many empty files costs no map of them.
	var marked []int32
	unmarked := map[key][]int32{}
	for i := int32(1); i < c.recs.len(); i++ {
		if f := c.recs.at(i); f.renameNew && empty(f) {
			marked = append(marked, i)
			unmarked[key{f.size, f.attr, f.stamps}] = nil
		}
	}
	if len(marked) == 0 {
		return
	}
	for i := int32(1); i < c.recs.len(); i++ {
		f := c.recs.at(i)
		if f.renameNew || !empty(f) {
			continue
		}
		k := key{f.size, f.attr, f.stamps}
		if o, ok := unmarked[k]; ok && len(o) < 2 {
			unmarked[k] = append(o, i) // two are as many as none: no pair
		}
	}
	for _, i := range marked {
		f := c.recs.at(i)
		if o := unmarked[key{f.size, f.attr, f.stamps}]; len(o) == 1 && c.recs.at(o[0]).pair == 0 {
			c.pairUp(i, o[0])
		}
	}
}

// parentStart is the cluster a '..' entry of a directory in directory p holds.
func (c *checker) parentStart(p int32) uint32 {
	if p <= 0 {
		return 0
	}
	s := c.recs.at(p).start
	if c.g.Type == ondisk.FAT32 && s == c.g.RootCluster {
		return 0
	}
	return s
}

// settleDotDots reports the '..' entries that name neither their parent nor, for a directory
// with two names, the other name's parent.
func (c *checker) settleDotDots() {
	for _, dd := range c.dotDots {
		if p := c.recs.at(dd.dir).pair; p != 0 && dd.got == c.parentStart(c.recs.at(p-1).parent) {
			continue
		}
		expect := c.parentStart(c.recs.at(dd.dir).parent)
		c.problem(DotEntries, Error, c.path(dd.dir), expect, dd.off, "invalid '..' entry in the second slot: cluster %d, attributes 0x%02x (want cluster %d, a directory)",
			dd.got, dd.attr, expect)
	}
}

// reportRenames reports each interrupted rename.
func (c *checker) reportRenames() {
	for _, p := range c.pairs {
		n := c.recs.at(p[0])
		c.problem(InterruptedRename, Error, c.path(p[0]), n.start, n.entryOff,
			"a rename was cut short: %s is the old name of this file (same first cluster, size and attributes; this entry is marked as the new name), which is kept", c.path(p[1]))
	}
}

// resolveInterrupted writes the resolution of every interrupted rename: a directory's '..' is
// pointed at the new name's parent, then the old entries and their long names are removed (and
// orphaned long-name entries with them), then the marks are cleared, each step flushed, so that a
// crash in between leaves a state this resolves again.
func (c *checker) resolveInterrupted() error {
	if len(c.pairs) == 0 && len(c.orphanLFNs) == 0 {
		return nil
	}
	for _, p := range c.pairs {
		n := c.recs.at(p[0])
		if !n.isDir() || !c.inData(n.start) {
			continue
		}
		var e [ondisk.DirEntrySize]byte
		off := c.g.ClusterOffset(n.start) + ondisk.DirEntrySize
		if err := c.readAt(e[:], off); err != nil {
			return err
		}
		d := ondisk.DecodeDirEntry(e[:])
		if d.Name != ondisk.DotDot || d.Cluster(c.g.Type) == c.parentStart(n.parent) {
			continue
		}
		d.SetCluster(c.parentStart(n.parent))
		d.Encode(e[:])
		if err := c.writeAt(e[:], off); err != nil {
			return err
		}
	}
	if err := c.flush(); err != nil {
		return err
	}
	var gone []int64
	for _, p := range c.pairs {
		gone = append(append(gone, c.recs.lfnOffsets(p[1])...), c.recs.at(p[1]).entryOff)
	}
	for _, offs := range c.orphanLFNs {
		gone = append(gone, offs...)
	}
	for _, off := range gone {
		if err := c.writeAt([]byte{0xE5}, off); err != nil {
			return err
		}
	}
	if err := c.flush(); err != nil {
		return err
	}
	for _, p := range c.pairs {
		n := c.recs.at(p[0])
		var b [1]byte
		if err := c.readAt(b[:], n.entryOff+12); err != nil {
			return err
		}
		if err := c.writeAt([]byte{b[0] &^ ondisk.RenameNew}, n.entryOff+12); err != nil {
			return err
		}
	}
	return c.flush()
}

// ResolveInterrupted completes on dev what a crash left half done in directories, and changes
// nothing else: renames (the new name kept) and orphaned long-name entries, what is left of a name
// whose entries cross sectors (deleted). It returns the problems it resolved.
func ResolveInterrupted(dev blockdev.Device) ([]Problem, error) {
	c, err := check(dev, Options{})
	if err != nil {
		return nil, err
	}
	var done []Problem
	for _, p := range c.rep.Problems {
		if p.Kind == InterruptedRename || p.Kind == OrphanLFN {
			done = append(done, p)
		}
	}
	if err := c.resolveInterrupted(); err != nil {
		return done, fmt.Errorf("fsck: complete what a crash cut short: %w", err)
	}
	return done, nil
}
