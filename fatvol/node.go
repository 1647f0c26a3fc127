package fatvol

import (
	"fmt"
	"math"
	"slices"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// node is a file or directory the engine has in memory: its short directory entry, its cluster
// chain as extents, and for directories their content. A node stays loaded while it is open, and
// a directory while anything below it is loaded or it is needed otherwise (dircache.go), so that
// every path to the same entry meets the same node.
type node struct {
	vol    *Volume
	parent *node // nil for the root
	off    int   // offset of the short entry in the parent's content; -1 for the root
	lfnOff int   // offset of its first long-name entry (== off when it has none)
	ent    ondisk.DirEntry
	name   string
	ext    []extent // cluster chain; valid when chainOK; changed only through setChain and appendRun
	// before[i] is how many clusters the chain holds ahead of ext[i]: a read finds its extent by
	// binary search instead of walking a fragmented chain from its start.
	before   []uint32
	chainOK  bool
	refs     int  // open handles
	unlinked bool // its entry is gone; clusters are freed at the last close
	dir      *dirContent
	// lastFrom is 1 + the FAT phase that writes the chain's last cluster when this volume
	// allocated it, 0 when that is not known: while that phase is not durable, nothing on disk
	// reaches that cluster, and linking more clusters to it needs no hold.
	lastFrom uint64
}

func (v *Volume) newRootNode() *node {
	n := &node{vol: v, off: -1, lfnOff: -1, name: "/"}
	n.ent.Attr = ondisk.AttrDirectory
	if v.geo.Type == ondisk.FAT32 {
		n.ent.SetCluster(v.geo.RootCluster)
	}
	return n
}

func (n *node) isRoot() bool { return n.parent == nil }
func (n *node) isDir() bool  { return n.ent.IsDir() }

// firstCluster is the entry's first cluster (0 for an empty file; the root cluster on FAT32, and
// 0 for the fixed root of FAT12/16).
func (n *node) firstCluster() uint32 { return n.ent.Cluster(n.vol.geo.Type) }

// pos is where the node's entry lives on the device, the kernel's i_pos: stable for the life of
// the entry, so it can name the node across restarts. The root's is 0.
func (n *node) pos() int64 {
	if n.isRoot() {
		return 0
	}
	return n.parent.entryOffset(n.off)
}

// extents returns the node's cluster chain, reading it the first time.
func (n *node) extents() ([]extent, error) {
	if n.chainOK {
		return n.ext, nil
	}
	first := n.firstCluster()
	if n.isRoot() && n.vol.geo.Type != ondisk.FAT32 {
		n.chainOK = true
		return nil, nil
	}
	ext, err := n.vol.fat.chain(first, n.vol.geo.Clusters)
	if err == nil && first != 0 {
		err = n.vol.claim(n, first)
	}
	if err != nil {
		return nil, n.vol.noteDamage(fmt.Errorf("%s: %w", n.path(), err))
	}
	n.setChain(ext)
	n.chainOK = true
	return ext, nil
}

// setChain makes ext the node's chain.
func (n *node) setChain(ext []extent) {
	n.ext = ext
	n.before = n.before[:0]
	var c uint32
	for _, e := range ext {
		n.before = append(n.before, c)
		c += e.count
	}
}

// appendRun adds the clusters of e to the end of the chain, merging with the last extent when
// they follow it on the device.
func (n *node) appendRun(e extent) {
	k := len(n.ext)
	if k > 0 && n.ext[k-1].start+n.ext[k-1].count == e.start {
		n.ext[k-1].count += e.count
		return
	}
	n.before = append(n.before, n.clusterCount())
	n.ext = append(n.ext, e)
}

// clusterCount is the length of the node's chain.
func (n *node) clusterCount() uint32 {
	k := len(n.ext)
	if k == 0 {
		return 0
	}
	return n.before[k-1] + n.ext[k-1].count
}

// chainBytes is how many bytes the node's chain holds.
func (n *node) chainBytes() int64 {
	return int64(n.clusterCount()) * int64(n.vol.geo.ClusterSize)
}

// lastCluster is the last cluster of the chain, 0 when empty.
func (n *node) lastCluster() uint32 {
	if len(n.ext) == 0 {
		return 0
	}
	e := n.ext[len(n.ext)-1]
	return e.start + e.count - 1
}

// path is the node's path for messages.
func (n *node) path() string {
	if n.isRoot() {
		return "/"
	}
	if n.parent.isRoot() {
		return "/" + n.name
	}
	return n.parent.path() + "/" + n.name
}

// storeEntry puts the in-memory entry back into the parent's content, to reach the disk at the
// next writeback.
func (n *node) storeEntry() {
	if n.isRoot() || n.unlinked {
		return
	}
	n.parent.dir.putEntry(n.off, &n.ent)
}

// grow appends count clusters to the chain, continuing after its last cluster when possible, and
// links them to it.
func (n *node) grow(count uint32) ([]extent, error) {
	if _, err := n.extents(); err != nil {
		return nil, err
	}
	last := n.lastCluster()
	goal := uint32(0)
	if last != 0 {
		goal = last + 1
		// A cut at last still waits for the entry's smaller size: a new link there could reach
		// the disk neither before the entry (the cut must wait for it) nor after (the larger
		// size must wait for the link). Settle the cut first.
		if n.vol.cutPending(last) {
			if err := n.vol.durable(); err != nil {
				return nil, err
			}
		}
	}
	got, err := n.vol.allocate(count, goal)
	if err != nil {
		return nil, err
	}
	if last != 0 {
		// The link waits on disk until the new clusters' own entries are durable, unless the
		// disk cannot reach last yet either.
		if n.lastFrom == 0 || n.lastFrom-1 <= n.vol.order.durableFAT {
			n.vol.holdLink(last)
		}
		n.vol.fat.set(last, got[0].start)
	} else {
		n.ent.SetCluster(got[0].start)
		n.vol.setClaim(n, got[0].start)
	}
	n.lastFrom = n.vol.order.fatPhases + 2
	for _, e := range got {
		n.appendRun(e)
	}
	return got, nil
}

// shrink keeps the first keep clusters of the chain and frees the rest.
func (n *node) shrink(keep uint32) error {
	if _, err := n.extents(); err != nil {
		return err
	}
	var kept []extent
	var freed []extent
	left := keep
	for _, e := range n.ext {
		switch {
		case left >= e.count:
			kept = append(kept, e)
			left -= e.count
		case left > 0:
			kept = append(kept, extent{e.start, left})
			freed = append(freed, extent{e.start + left, e.count - left})
			left = 0
		default:
			freed = append(freed, e)
		}
	}
	n.setChain(kept)
	n.lastFrom = 0
	if len(kept) == 0 {
		n.ent.SetCluster(0)
		n.vol.release(freed)
		return nil
	}
	// The entry's new size goes out first, then the cut, then the tail is freed: at no point
	// does the disk hold a size past the chain, or a chain running into free clusters.
	n.vol.discard(freed)
	n.vol.cut(n.lastCluster(), freed)
	return nil
}

// devRanges maps the byte range [off, off+length) of the node's clusters to device ranges,
// merging clusters that are adjacent on the device. The range must lie within the chain.
func (n *node) devRanges(off, length int64) []devRange {
	return n.appendDevRanges(nil, off, length)
}

// appendDevRanges is devRanges appending to out, so a caller can keep them off the heap.
func (n *node) appendDevRanges(out []devRange, off, length int64) []devRange {
	cs := int64(n.vol.geo.ClusterSize)
	// The first extent that holds off: the last whose start is at or before it.
	first, _ := slices.BinarySearch(n.before, uint32(min(off/cs, math.MaxUint32)))
	if first == len(n.before) || int64(n.before[first])*cs > off {
		first--
	}
	first = max(first, 0)
	for i, e := range n.ext[first:] {
		base := int64(n.before[first+i]) * cs // file offset where extent e starts
		size := int64(e.count) * cs
		if off < base+size && length > 0 {
			start := max(off, base)
			end := min(off+length, base+size)
			dev := n.vol.geo.ClusterOffset(e.start) + (start - base)
			if k := len(out); k > 0 && out[k-1].off+out[k-1].length == dev {
				out[k-1].length += end - start
			} else {
				out = append(out, devRange{off: dev, length: end - start})
			}
		}
		if base+size >= off+length {
			break
		}
	}
	return out
}

// devRange is a contiguous byte range on the device; buf, when set, is what to write there.
type devRange struct {
	off    int64
	length int64
	buf    []byte
}
