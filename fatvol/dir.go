package fatvol

import (
	"fmt"
	"strings"
	"syscall"
	"unicode/utf16"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// maxDirBytes is FAT's limit on a directory: 65,536 entries of 32 bytes.
const maxDirBytes = 65536 * ondisk.DirEntrySize

// dirContent is a directory held in memory: its raw entries, which sectors of them are dirty, and
// an index from names to entries so that lookups and creates cost the same in a directory of ten
// or ten thousand entries.
type dirContent struct {
	n        *node
	buf      []byte
	dirty    []bool         // per sector of buf
	fresh    []bool         // per sector: in a cluster no entry or chain on disk points at yet
	names    map[string]int // folded long (or shown short) name -> short entry offset
	shorts   map[ondisk.ShortName]int
	slots    map[int]slot  // short entry offset -> where its name starts, and the name
	children map[int]*node // loaded nodes by short entry offset
	end      int           // first entry of the free tail (the 0x00 marker), len(buf) when none
	holeHint int           // no deleted entry lies before this offset
	labelOff int           // root only: the volume-label entry, -1 when none
	dotOff   int           // offset of the '..' entry, -1 when none
	// claimed are the clusters its entries claimed (damage.go), which go with it (dircache.go).
	claimed []uint32
	// Its place among the directories in memory, and what it held when last counted.
	newer, older *dirContent
	listed       bool
	cost         int64
}

type slot struct {
	lfnOff int
	name   string
}

// loadDir reads a directory's content and indexes it, once.
func (n *node) loadDir() (*dirContent, error) {
	if n.dir != nil {
		n.vol.dirs.used(n.dir)
		return n.dir, nil
	}
	if !n.isDir() {
		return nil, syscall.ENOTDIR
	}
	v := n.vol
	var buf []byte
	if n.isRoot() && v.geo.Type != ondisk.FAT32 {
		buf = make([]byte, v.geo.RootDirSectors*int64(v.geo.SectorSize))
		if _, err := v.dev.ReadAt(buf, v.geo.RootDirSector*int64(v.geo.SectorSize)); err != nil {
			return nil, fmt.Errorf("read root directory: %w", err)
		}
		n.chainOK = true
	} else {
		ext, err := n.readDirChain()
		if err != nil {
			return nil, v.noteDamage(err)
		}
		n.setChain(ext)
		n.chainOK = true
		buf = make([]byte, int64(n.clusterCount())*int64(v.geo.ClusterSize))
		var at int64
		for _, r := range n.devRanges(0, int64(len(buf))) {
			if _, err := v.dev.ReadAt(buf[at:at+r.length], r.off); err != nil {
				return nil, fmt.Errorf("read directory %s: %w", n.path(), err)
			}
			at += r.length
		}
	}
	d := &dirContent{n: n, buf: buf, dirty: make([]bool, len(buf)/v.geo.SectorSize), fresh: make([]bool, len(buf)/v.geo.SectorSize)}
	d.index()
	n.dir = d
	v.dirs.used(d)
	return d, nil
}

// readDirChain reads a directory's chain and claims its clusters: a directory that loops back to
// an ancestor or shares clusters with another directory in memory is corrupt, so that a walk
// never loops (ancestors stay in memory while a directory below them is: dircache.go).
func (n *node) readDirChain() ([]extent, error) {
	v := n.vol
	if n.firstCluster() == 0 {
		return nil, fmt.Errorf("%w: directory %s has no clusters", ErrCorrupt, n.path())
	}
	for a := n.parent; a != nil; a = a.parent {
		if a.firstCluster() == n.firstCluster() {
			return nil, fmt.Errorf("%w: directory %s loops back to %s", ErrCorrupt, n.path(), a.path())
		}
	}
	limit := max(uint32(maxDirBytes/v.geo.ClusterSize), 1)
	ext, err := v.fat.chain(n.firstCluster(), limit)
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", n.path(), err)
	}
	for _, e := range ext {
		for c := e.start; c < e.start+e.count; c++ {
			if err := v.claim(n, c); err != nil {
				return nil, err
			}
		}
	}
	return ext, nil
}

// index parses the raw entries: long names are joined and checked (order and checksum) the way
// Linux does; entries whose long name does not belong to them show their short name.
func (d *dirContent) index() {
	v := d.n.vol
	d.names = map[string]int{}
	d.shorts = map[ondisk.ShortName]int{}
	d.slots = map[int]slot{}
	d.children = map[int]*node{}
	d.end, d.holeHint, d.labelOff, d.dotOff = len(d.buf), len(d.buf), -1, -1

	var parts [ondisk.MaxLFNSlots][]uint16
	lfnOff, want, sum := -1, 0, byte(0)
	for o := 0; o+ondisk.DirEntrySize <= len(d.buf); o += ondisk.DirEntrySize {
		p := d.buf[o : o+ondisk.DirEntrySize]
		if ondisk.IsEnd(p) {
			d.end = o
			break
		}
		if ondisk.IsDeleted(p) {
			lfnOff = -1
			d.holeHint = min(d.holeHint, o)
			continue
		}
		if ondisk.IsLongName(p) {
			l := ondisk.DecodeLFN(p)
			switch {
			case l.Last && l.Ord >= 1 && int(l.Ord) <= ondisk.MaxLFNSlots:
				lfnOff, want, sum = o, int(l.Ord), l.Checksum
				parts[want-1] = append(parts[want-1][:0], l.LFNUnits()...)
			case lfnOff >= 0 && !l.Last && int(l.Ord) == want-1 && l.Checksum == sum && l.Ord >= 1:
				want--
				parts[want-1] = append(parts[want-1][:0], l.LFNUnits()...)
			default:
				lfnOff = -1
			}
			continue
		}
		e := ondisk.DecodeDirEntry(p)
		if e.IsVolumeLabel() {
			if d.n.isRoot() && d.labelOff < 0 {
				d.labelOff = o
			}
			lfnOff = -1
			continue
		}
		if e.Name == ondisk.Dot || e.Name == ondisk.DotDot {
			if e.Name == ondisk.DotDot {
				d.dotOff = o
			}
			lfnOff = -1
			continue
		}
		name := ""
		start := o
		if lfnOff >= 0 && want == 1 && ondisk.LFNChecksum(e.Name) == sum {
			var units []uint16
			total := (o - lfnOff) / ondisk.DirEntrySize
			for i := 0; i < total; i++ {
				units = append(units, parts[i]...)
			}
			name = string(utf16.Decode(units))
			start = lfnOff
		}
		lfnOff = -1
		if !usableName(name) {
			name = e.Name.DisplayName(e.NTCase, v.opts.ShortName, v.opts.CodePage)
		}
		if !usableName(name) {
			// Kept (the directory is not empty, the short name stays taken) but neither listed
			// nor reachable: a path cannot name it.
			name = ""
		}
		d.slots[o] = slot{lfnOff: start, name: name}
		if _, dup := d.names[ondisk.FoldName(name)]; !dup && name != "" {
			d.names[ondisk.FoldName(name)] = o
		}
		if _, dup := d.shorts[e.Name]; !dup {
			d.shorts[e.Name] = o
		}
	}
}

// usableName tells whether a name read from disk can be one element of a path: a damaged or
// hostile directory may hold names with '/' or NUL, or "." and ".." as long names, which would
// make a listed name lead elsewhere.
func usableName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// lookup finds the entry for name: by its long name (case-insensitively), else by its short name.
func (d *dirContent) lookup(name string) (int, bool) {
	clean, err := ondisk.CleanName(name)
	if err != nil {
		return 0, false
	}
	if o, ok := d.names[ondisk.FoldName(clean)]; ok {
		return o, true
	}
	if sn, ok := ondisk.ParseShortName(clean, d.n.vol.opts.CodePage); ok {
		if o, ok := d.shorts[sn]; ok {
			return o, true
		}
	}
	return 0, false
}

// entry decodes the short entry at off.
func (d *dirContent) entry(off int) ondisk.DirEntry {
	return ondisk.DecodeDirEntry(d.buf[off : off+ondisk.DirEntrySize])
}

func (d *dirContent) putEntry(off int, e *ondisk.DirEntry) {
	e.Encode(d.buf[off : off+ondisk.DirEntrySize])
	d.markDirty(off, ondisk.DirEntrySize)
}

// sectorOf is the index of the sector of the content that holds offset off.
func (d *dirContent) sectorOf(off int) int { return off / d.n.vol.geo.SectorSize }

func (d *dirContent) markDirty(off, length int) {
	ss := d.n.vol.geo.SectorSize
	for s := off / ss; s <= (off+length-1)/ss; s++ {
		d.dirty[s] = true
	}
	d.n.vol.dirtyDirs[d] = struct{}{}
}

// markFresh records that [off, off+length) lies in clusters just allocated: written before any
// chain or entry that points at them.
func (d *dirContent) markFresh(off, length int) {
	ss := d.n.vol.geo.SectorSize
	for len(d.fresh) < len(d.dirty) {
		d.fresh = append(d.fresh, false)
	}
	for s := off / ss; s <= (off+length-1)/ss; s++ {
		d.fresh[s] = true
	}
}

// child returns the loaded node for the entry at off, loading it if needed.
func (d *dirContent) child(off int) *node {
	if c, ok := d.children[off]; ok {
		return c
	}
	s := d.slots[off]
	c := &node{vol: d.n.vol, parent: d.n, off: off, lfnOff: s.lfnOff, ent: d.entry(off), name: s.name}
	d.children[off] = c
	return c
}

// forget drops a child node that is no longer needed in memory.
func (d *dirContent) forget(c *node) {
	if c.refs == 0 && !c.isDir() && d.children[c.off] == c {
		delete(d.children, c.off)
	}
}

// insert adds an entry named name (already unique in d) with the given short-entry fields, writing
// its long-name entries when the name needs them. It returns the short entry's offset. replacing
// is the offset of an entry about to be removed (a rename that only changes case), whose short
// name may be taken again; -1 for none.
func (d *dirContent) insert(name string, e ondisk.DirEntry, replacing int) (int, error) {
	clean, err := ondisk.CleanName(name)
	if err != nil {
		return 0, nameErr(err)
	}
	sn, ntCase, needLFN, err := ondisk.MakeShortName(clean, d.n.vol.opts.ShortName, d.n.vol.opts.CodePage, func(s ondisk.ShortName) bool {
		o, used := d.shorts[s]
		return used && o != replacing
	})
	if err != nil {
		return 0, nameErr(err)
	}
	e.Name, e.NTCase = sn, ntCase
	var lfns []ondisk.LFNEntry
	if needLFN {
		lfns = ondisk.LFNEntries(clean, ondisk.LFNChecksum(sn))
	}
	count := len(lfns) + 1
	start, err := d.findFree(count)
	if err != nil {
		return 0, err
	}
	o := start
	for i := range lfns {
		lfns[i].Encode(d.buf[o : o+ondisk.DirEntrySize])
		o += ondisk.DirEntrySize
	}
	e.Encode(d.buf[o : o+ondisk.DirEntrySize])
	d.markDirty(start, count*ondisk.DirEntrySize)
	if start+count*ondisk.DirEntrySize > d.end {
		d.end = start + count*ondisk.DirEntrySize
		// What lies past the new end may be left from an older, longer directory: the entry right
		// after it must read as the end marker.
		if d.end < len(d.buf) && d.buf[d.end] != 0 {
			d.buf[d.end] = 0
			d.markDirty(d.end, 1)
		}
	}
	shown := clean
	if !needLFN {
		shown = sn.DisplayName(ntCase, d.n.vol.opts.ShortName, d.n.vol.opts.CodePage)
	}
	d.slots[o] = slot{lfnOff: start, name: shown}
	d.names[ondisk.FoldName(shown)] = o
	d.shorts[sn] = o
	if first := d.sectorOf(o) * d.n.vol.geo.SectorSize; first > start {
		d.n.vol.crossingCreate(d, start, first, o)
	}
	return o, nil
}

// remove deletes the entry at off and its long-name entries.
func (d *dirContent) remove(off int) {
	s := d.slots[off]
	e := d.entry(off)
	if first := d.sectorOf(off) * d.n.vol.geo.SectorSize; first > s.lfnOff {
		d.n.vol.crossingRemove(d, s.lfnOff, first, off)
	}
	for o := s.lfnOff; o <= off; o += ondisk.DirEntrySize {
		ondisk.MarkDeleted(d.buf[o:])
	}
	d.markDirty(s.lfnOff, off+ondisk.DirEntrySize-s.lfnOff)
	if d.names[ondisk.FoldName(s.name)] == off {
		delete(d.names, ondisk.FoldName(s.name))
	}
	if d.shorts[e.Name] == off {
		delete(d.shorts, e.Name)
	}
	delete(d.slots, off)
	delete(d.children, off)
	d.holeHint = min(d.holeHint, s.lfnOff)
}

// findFree returns the offset of count consecutive free entries: a run of deleted entries inside
// one sector when there is one (one write then puts or takes the name whole), else the first run
// of deleted entries that crosses sectors (or clusters) or the free tail, growing the directory
// by whole clusters when the tail is too short, as vfat places names: a directory holds what the
// format allows. The writes of a name that crosses sectors are ordered at writeback (crossing).
func (d *dirContent) findFree(count int) (int, error) {
	need := count * ondisk.DirEntrySize
	if need <= d.n.vol.geo.SectorSize {
		found, runStart, _, firstHole := d.scanHoles(d.holeHint, need, true)
		if found {
			return runStart, nil
		}
		// Remember where the first hole is, so the next search starts there, not at the
		// beginning.
		d.holeHint = d.end
		if firstHole >= 0 {
			d.holeHint = firstHole
		}
	}
	found, runStart, run, _ := d.scanHoles(d.holeHint, need, false)
	if found {
		return runStart, nil
	}
	// A run of deleted entries that reaches the end continues into the free tail.
	start := d.end
	if run > 0 && runStart+run == d.end {
		start = runStart
	}
	if start+need <= len(d.buf) {
		return start, nil
	}
	if err := d.grow(start + need - len(d.buf)); err != nil {
		return 0, err
	}
	return start, nil
}

// scanHoles looks for need bytes of consecutive deleted entries from offset from up to the end
// marker (within one sector when oneSector). Without a find, it tells where the first hole was
// (-1 for none) and the run of deleted entries that reaches the end, which the tail continues.
func (d *dirContent) scanHoles(from, need int, oneSector bool) (found bool, runStart, run, firstHole int) {
	ss := d.n.vol.geo.SectorSize
	firstHole = -1
	for o := from; o < d.end; o += ondisk.DirEntrySize {
		if oneSector && o%ss == 0 {
			run = 0
		}
		if !ondisk.IsDeleted(d.buf[o:]) {
			run = 0
			continue
		}
		if firstHole < 0 {
			firstHole = o
		}
		if run == 0 {
			runStart = o
		}
		run += ondisk.DirEntrySize
		if run == need {
			return true, runStart, run, firstHole
		}
	}
	return false, runStart, run, firstHole
}

// grow extends the directory by enough zeroed clusters for extra more bytes. The fixed root of
// FAT12/16 cannot grow, and no directory may pass 65,536 entries: both are ENOSPC, as on Linux.
func (d *dirContent) grow(extra int) error {
	v := d.n.vol
	if d.n.isRoot() && v.geo.Type != ondisk.FAT32 {
		return errNoSpace
	}
	cs := v.geo.ClusterSize
	clusters := (extra + cs - 1) / cs
	if len(d.buf)+clusters*cs > maxDirBytes {
		return errNoSpace
	}
	if _, err := d.n.grow(uint32(clusters)); err != nil {
		return err
	}
	old := len(d.buf)
	d.buf = append(d.buf, make([]byte, clusters*cs)...)
	d.dirty = append(d.dirty, make([]bool, clusters*cs/v.geo.SectorSize)...)
	// New clusters are written whole, zeroed, before the link to them: stale data there must not
	// read as entries.
	d.markDirty(old, clusters*cs)
	d.markFresh(old, clusters*cs)
	return nil
}

// isEmpty tells whether the directory holds nothing but '.' and '..'.
func (d *dirContent) isEmpty() bool { return len(d.slots) == 0 }

// devOffset maps an offset in the content to the device.
func (d *dirContent) devOffset(off int) int64 { return d.n.entryOffset(off) }

// entryOffset is where the byte at off of the directory n lives on the device. It needs only
// n's chain, which a removed file's old parent keeps when its content leaves memory.
func (n *node) entryOffset(off int) int64 {
	v := n.vol
	if n.isRoot() && v.geo.Type != ondisk.FAT32 {
		return v.geo.RootDirSector*int64(v.geo.SectorSize) + int64(off)
	}
	r := n.devRanges(int64(off), 1)
	if len(r) == 0 {
		return -1
	}
	return r[0].off
}

// dirtyRanges returns the dirty sectors (with fresh, only those of fresh clusters) as device
// ranges with their bytes, merged where adjacent, and clears their dirty and fresh marks.
func (d *dirContent) dirtyRanges(fresh bool) []devRange {
	v := d.n.vol
	ss := v.geo.SectorSize
	var out []devRange
	last := -2 // buffer sector of the end of the last range
	for s, dirty := range d.dirty {
		if !dirty || (fresh && (s >= len(d.fresh) || !d.fresh[s])) {
			continue
		}
		d.dirty[s] = false
		if s < len(d.fresh) {
			d.fresh[s] = false
		}
		dev := d.devOffset(s * ss)
		if k := len(out); k > 0 && last == s-1 && out[k-1].off+out[k-1].length == dev {
			out[k-1].length += int64(ss)
			out[k-1].buf = out[k-1].buf[:len(out[k-1].buf)+ss]
		} else {
			out = append(out, devRange{off: dev, length: int64(ss), buf: d.buf[s*ss : (s+1)*ss : len(d.buf)]})
		}
		last = s
	}
	return out
}
