package fatvol

import (
	"fmt"
	"sort"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Normalised FAT entry values, the same for all three widths, so the rest of the engine never
// looks at the width.
const (
	entFree uint32 = 0
	entBad  uint32 = 0x0FFFFFF7
	entEOC  uint32 = 0x0FFFFFFF
)

// table is the file allocation table, held whole in memory as the raw bytes of the active copy.
// Keeping the raw bytes (rather than decoded entries) lets writeback copy dirty sectors straight
// to every FAT copy. Memory is what the FAT takes on disk: 4 bytes a cluster at most.
type table struct {
	typ        ondisk.FATType
	raw        []byte
	sectorSize int
	maxCluster uint32   // highest valid data cluster
	dirty      []uint64 // one bit per FAT sector
	free       uint32   // free data clusters, exact
	next       uint32   // next-fit hint: allocation starts looking here
	// referenced has a bit for every cluster some FAT entry points to. No chain may start at
	// such a cluster: an entry that does starts inside another chain (a cross-link).
	referenced []uint64
	// merged holds the clusters two or more FAT entries point to, found at open (two chains
	// joined: a cross-link). Such a volume is opened damaged, so the FAT never changes and the
	// set stays true; no chain is followed through them.
	merged map[uint32]bool
	// fresh has a bit for every cluster allocated since open. An entry read from disk that starts
	// at one, with no entry of this session owning it, was dangling: it pointed at a free cluster.
	fresh []uint64
}

func newTable(g *ondisk.Geometry, raw []byte) *table {
	t := &table{
		typ:        g.Type,
		raw:        raw,
		sectorSize: g.SectorSize,
		maxCluster: g.MaxCluster(),
		dirty:      make([]uint64, (int64(len(raw))/int64(g.SectorSize)+63)/64),
		next:       2,
		referenced: make([]uint64, (int64(g.MaxCluster())+64)/64),
		fresh:      make([]uint64, (int64(g.MaxCluster())+64)/64),
	}
	for c := uint32(2); c <= t.maxCluster; c++ {
		switch v := t.get(c); {
		case v == entFree:
			t.free++
		case t.isData(v):
			if t.isReferenced(v) {
				if t.merged == nil {
					t.merged = map[uint32]bool{}
				}
				t.merged[v] = true
			}
			t.setReferenced(v, true)
		}
	}
	return t
}

func (t *table) isFresh(c uint32) bool { return t.fresh[c/64]&(1<<(c%64)) != 0 }

// unmarkFresh forgets that c was allocated since open.
func (t *table) unmarkFresh(c uint32) { t.fresh[c/64] &^= 1 << (c % 64) }

func (t *table) isReferenced(c uint32) bool { return t.referenced[c/64]&(1<<(c%64)) != 0 }

func (t *table) setReferenced(c uint32, on bool) {
	if on {
		t.referenced[c/64] |= 1 << (c % 64)
	} else {
		t.referenced[c/64] &^= 1 << (c % 64)
	}
}

// damage looks for what no consistent FAT holds, so that the engine can refuse to write to a
// volume that needs repair: an entry pointing outside the data area, two entries pointing to the
// same cluster, a used cluster pointing to a free one, and chains that loop. It takes one pass
// over the FAT and a bit per cluster. It returns the first such finding, nil when none.
func (t *table) damage() error {
	for c := uint32(2); c <= t.maxCluster; c++ {
		v := t.get(c)
		switch {
		case v == entFree || v == entEOC || v == entBad:
		case !t.isData(v):
			return fmt.Errorf("%w: cluster %d points to %d, outside the data area (2..%d)", ErrCorrupt, c, v, t.maxCluster)
		case t.merged[v]:
			return fmt.Errorf("%w: cluster %d is in two chains (cross-linked)", ErrCorrupt, v)
		case t.get(v) == entFree:
			return fmt.Errorf("%w: cluster %d points to free cluster %d", ErrCorrupt, c, v)
		}
	}
	// Every chain starts at a cluster nothing points to. With no cluster pointed to twice,
	// following the chains from those starts reaches every used cluster not on a loop.
	seen := make([]uint64, len(t.referenced))
	for c := uint32(2); c <= t.maxCluster; c++ {
		if t.get(c) == entFree || t.isReferenced(c) {
			continue
		}
		for at := c; t.isData(at); at = t.get(at) {
			seen[at/64] |= 1 << (at % 64)
		}
	}
	for c := uint32(2); c <= t.maxCluster; c++ {
		if v := t.get(c); v != entFree && v != entBad && seen[c/64]&(1<<(c%64)) == 0 {
			return fmt.Errorf("%w: cluster %d is on a chain that loops", ErrCorrupt, c)
		}
	}
	return nil
}

// byteOffset is where entry c starts in the raw table.
func (t *table) byteOffset(c uint32) int {
	switch t.typ {
	case ondisk.FAT12:
		return int(c + c/2)
	case ondisk.FAT16:
		return int(c) * 2
	default:
		return int(c) * 4
	}
}

// get returns entry c, normalised: entFree, entBad, entEOC or a cluster number.
func (t *table) get(c uint32) uint32 {
	o := t.byteOffset(c)
	switch t.typ {
	case ondisk.FAT12:
		v := uint32(t.raw[o]) | uint32(t.raw[o+1])<<8
		if c&1 != 0 {
			v >>= 4
		}
		v &= 0xFFF
		switch {
		case v >= 0xFF8:
			return entEOC
		case v == 0xFF7:
			return entBad
		}
		return v
	case ondisk.FAT16:
		v := uint32(t.raw[o]) | uint32(t.raw[o+1])<<8
		switch {
		case v >= 0xFFF8:
			return entEOC
		case v == 0xFFF7:
			return entBad
		}
		return v
	default:
		v := (uint32(t.raw[o]) | uint32(t.raw[o+1])<<8 | uint32(t.raw[o+2])<<16 | uint32(t.raw[o+3])<<24) & 0x0FFFFFFF
		switch {
		case v >= 0x0FFFFFF8:
			return entEOC
		case v == 0x0FFFFFF7:
			return entBad
		}
		return v
	}
}

// set stores a normalised value in entry c, keeps the free count, and marks the sector(s) dirty.
func (t *table) set(c, v uint32) {
	old := t.get(c)
	if old == entFree && v != entFree {
		t.free--
	} else if old != entFree && v == entFree {
		t.free++
	}
	if t.isData(old) {
		t.setReferenced(old, false)
	}
	if t.isData(v) {
		t.setReferenced(v, true)
	}
	t.put(c, v)
	t.markEntryDirty(c)
}

// put stores a normalised value in entry c's bytes and nothing else.
func (t *table) put(c, v uint32) {
	o := t.byteOffset(c)
	switch t.typ {
	case ondisk.FAT12:
		v &= 0xFFF
		if c&1 != 0 {
			t.raw[o] = t.raw[o]&0x0F | byte(v<<4)
			t.raw[o+1] = byte(v >> 4)
		} else {
			t.raw[o] = byte(v)
			t.raw[o+1] = t.raw[o+1]&0xF0 | byte(v>>8)
		}
	case ondisk.FAT16:
		t.raw[o], t.raw[o+1] = byte(v), byte(v>>8)
	default:
		// The top four bits are reserved and must be preserved.
		v = v&0x0FFFFFFF | uint32(t.raw[o+3]&0xF0)<<24
		t.raw[o], t.raw[o+1], t.raw[o+2], t.raw[o+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
}

// markEntryDirty marks the sector(s) holding entry c dirty.
func (t *table) markEntryDirty(c uint32) {
	width := 2
	if t.typ == ondisk.FAT32 {
		width = 4
	}
	t.markDirty(t.byteOffset(c), width)
}

func (t *table) markDirty(off, n int) {
	for s := off / t.sectorSize; s <= (off+n-1)/t.sectorSize; s++ {
		t.dirty[s/64] |= 1 << (s % 64)
	}
}

// dirtyRuns returns the dirty sectors as sorted runs of consecutive sectors.
func (t *table) dirtyRuns() []sectorRun {
	var runs []sectorRun
	for w, bits := range t.dirty {
		for bits != 0 {
			b := 0
			for bits&(1<<b) == 0 {
				b++
			}
			bits &^= 1 << b
			s := int64(w*64 + b)
			if n := len(runs); n > 0 && runs[n-1].start+runs[n-1].count == s {
				runs[n-1].count++
			} else {
				runs = append(runs, sectorRun{start: s, count: 1})
			}
		}
	}
	return runs
}

func (t *table) clearDirty() { clear(t.dirty) }

// isDirty tells whether some FAT sector waits to be written.
func (t *table) isDirty() bool {
	for _, w := range t.dirty {
		if w != 0 {
			return true
		}
	}
	return false
}

// sectorRun is a run of consecutive sectors.
type sectorRun struct{ start, count int64 }

// isData tells whether v names a data cluster (not free, bad, EOC or reserved).
func (t *table) isData(v uint32) bool { return v >= 2 && v <= t.maxCluster }

// extent is a run of consecutive clusters.
type extent struct {
	start uint32
	count uint32
}

// chain reads the cluster chain starting at first into extents. It refuses chains that leave the
// data area, loop, or run longer than limit clusters, so a hostile image cannot hang the engine.
func (t *table) chain(first uint32, limit uint32) ([]extent, error) {
	var ext []extent
	if first == 0 {
		return nil, nil
	}
	if t.isData(first) && t.isReferenced(first) {
		return nil, fmt.Errorf("%w: chain from cluster %d starts inside another chain (cross-linked)", ErrCorrupt, first)
	}
	c := first
	for n := uint32(0); ; n++ {
		if !t.isData(c) {
			return ext, fmt.Errorf("%w: chain from cluster %d reaches invalid cluster %d", ErrCorrupt, first, c)
		}
		if t.merged[c] {
			return ext, fmt.Errorf("%w: chain from cluster %d reaches cluster %d, which another chain holds too (cross-linked)", ErrCorrupt, first, c)
		}
		if n >= limit {
			return ext, fmt.Errorf("%w: chain from cluster %d is longer than %d clusters (a cycle?)", ErrCorrupt, first, limit)
		}
		if k := len(ext); k > 0 && ext[k-1].start+ext[k-1].count == c {
			ext[k-1].count++
		} else {
			ext = append(ext, extent{c, 1})
		}
		v := t.get(c)
		switch {
		case v == entEOC:
			return ext, nil
		case v == entFree || v == entBad:
			return ext, fmt.Errorf("%w: chain from cluster %d runs into a free or bad cluster at %d", ErrCorrupt, first, c)
		}
		c = v
	}
}

// allocate takes n free clusters, preferring to continue right after goal (so a growing file stays
// contiguous), then the first free run of at least n clusters from the next-fit hint, and only
// then scattered runs. The clusters are chained together, ending in EOC; linking them to an
// existing chain is the caller's job.
func (t *table) allocate(n uint32, goal uint32) ([]extent, error) {
	if n == 0 {
		return nil, nil
	}
	if n > t.free {
		return nil, errNoSpace
	}
	var got []extent
	// Taken clusters are marked at once, so later searches cannot take them twice.
	take := func(start, count uint32) {
		for c := start; c < start+count; c++ {
			t.set(c, entEOC)
			t.fresh[c/64] |= 1 << (c % 64)
		}
		got = append(got, extent{start, count})
		n -= count
	}
	// Continue the file in place when the clusters after it are free.
	if t.isData(goal) {
		run := t.freeRunAt(goal, n)
		if run > 0 {
			take(goal, run)
		}
	}
	if n > 0 {
		if start, ok := t.findRun(n); ok {
			take(start, n)
		}
	}
	// No run is long enough: take free runs in order from the hint.
	for c := t.next; n > 0; {
		if t.get(c) == entFree {
			run := t.freeRunAt(c, n)
			take(c, run)
			c += run
		} else {
			c++
		}
		if c > t.maxCluster {
			c = 2
		}
	}
	// Link them: each cluster to the next, the last to EOC.
	for i, e := range got {
		for c := e.start; c < e.start+e.count-1; c++ {
			t.set(c, c+1)
		}
		last := e.start + e.count - 1
		if i+1 < len(got) {
			t.set(last, got[i+1].start)
		} else {
			t.set(last, entEOC)
		}
	}
	last := got[len(got)-1]
	t.next = last.start + last.count
	if t.next > t.maxCluster {
		t.next = 2
	}
	return got, nil
}

// freeRunAt counts free clusters from c on, up to max.
func (t *table) freeRunAt(c, max uint32) uint32 {
	var n uint32
	for n < max && c+n <= t.maxCluster && t.get(c+n) == entFree {
		n++
	}
	return n
}

// findRun looks for n consecutive free clusters, starting at the hint and wrapping once.
func (t *table) findRun(n uint32) (uint32, bool) {
	scan := func(from, to uint32) (uint32, bool) {
		var start, run uint32
		for c := from; c <= to; c++ {
			if t.get(c) != entFree {
				run = 0
				continue
			}
			if run == 0 {
				start = c
			}
			run++
			if run == n {
				return start, true
			}
		}
		return 0, false
	}
	if s, ok := scan(t.next, t.maxCluster); ok {
		return s, true
	}
	if t.next > 2 {
		return scan(2, min(t.maxCluster, t.next+n-2))
	}
	return 0, false
}

// freeChain marks every cluster of the extents free.
func (t *table) freeChain(ext []extent) {
	for _, e := range ext {
		for c := e.start; c < e.start+e.count; c++ {
			t.set(c, entFree)
		}
	}
}

// sortRuns orders device ranges by offset; writeback issues them in that order.
func sortRuns(r []devRange) {
	sort.Slice(r, func(i, j int) bool { return r[i].off < r[j].off })
}
