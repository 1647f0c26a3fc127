package fatvol

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// MaxFileSize is FAT's limit: sizes are 32-bit.
const MaxFileSize = 1<<32 - 1

// zeroes is a shared buffer of zero bytes for filling gaps: a gap is filled in pieces of its size,
// and a file's tail is padded to the end of a cache page (at most 32 KiB) in one. Small, since it
// is live heap for the life of every process, which the collector's goal grows with.
var zeroes = make([]byte, 64<<10)

// clustersFor is how many clusters hold size bytes.
func (v *Volume) clustersFor(size int64) uint32 {
	cs := int64(v.geo.ClusterSize)
	return uint32((size + cs - 1) / cs)
}

// readAt reads file data. A chain shorter than the size is corruption, reported as EIO the way
// Linux does, after the bytes the chain does hold.
func (n *node) readAt(p []byte, off int64) (int, error) {
	size := int64(n.ent.Size)
	if off >= size {
		return 0, nil
	}
	want := min(int64(len(p)), size-off)
	if _, err := n.extents(); err != nil {
		return 0, err
	}
	avail := min(want, max(n.chainBytes()-off, 0))
	done := 0
	var local [4]devRange // most reads fall in one or a few runs of clusters
	for _, r := range n.appendDevRanges(local[:0], off, avail) {
		buf := p[done : done+int(r.length)]
		for {
			batches := n.vol.cache.batchesDone()
			if _, err := n.vol.dev.ReadAt(buf, r.off); err != nil {
				return done, fmt.Errorf("%s: read: %w", n.path(), err)
			}
			if n.vol.cache.overlay(buf, r.off, batches) {
				break
			}
		}
		done += int(r.length)
	}
	if int64(done) < want {
		return done, n.vol.noteDamage(fmt.Errorf("%s: %w: cluster chain ends before the file size", n.path(), ErrCorrupt))
	}
	return done, nil
}

// writeAt writes file data, allocating clusters as needed and zero-filling any gap between the
// old end of the file and off, so a sparse write never exposes stale disk contents.
func (n *node) writeAt(p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	end := off + int64(len(p))
	if off < 0 || end > MaxFileSize {
		return 0, syscall.EFBIG
	}
	if err := n.ensureClusters(end); err != nil {
		return 0, err
	}
	size := int64(n.ent.Size)
	if off > size {
		if err := n.zeroRange(size, off); err != nil {
			return 0, err
		}
		size = off
	}
	if err := n.cacheWrite(p, off, size); err != nil {
		return 0, err
	}
	if end > int64(n.ent.Size) {
		n.ent.Size = uint32(end)
	}
	n.touch(true)
	return len(p), nil
}

// cacheWrite puts p at file offset off into the cache. size is the file's size before the write:
// bytes of partly written units past it need not be kept.
func (n *node) cacheWrite(p []byte, off, size int64) error {
	done := int64(0)
	for _, r := range n.devRanges(off, int64(len(p))) {
		keepFrom := r.off + (size - (off + done)) // device offset of the old end of file
		if size <= off+done {
			keepFrom = r.off
		}
		if err := n.vol.cache.write(p[done:done+r.length], r.off, keepFrom); err != nil {
			return fmt.Errorf("%s: %w", n.path(), err)
		}
		done += r.length
	}
	return nil
}

// padTail fills the rest of the cache page that holds the file's end with zeros, within its
// last cluster, while that end is still dirty: bytes past the end belong to nothing (a file that
// grows is zero-filled), and a page written whole needs no read of its old content in the
// device's page cache; where a cluster is a page, files written one after another then leave as
// one request instead of one each.
func (n *node) padTail() error {
	size := int64(n.ent.Size)
	cs := int64(n.vol.geo.ClusterSize)
	if n.isDir() || !n.chainOK || size%cs == 0 {
		return nil
	}
	r := n.devRanges(size-1, 1)
	if len(r) == 0 || !n.vol.cache.isDirty(r[0].off) {
		return nil
	}
	end := r[0].off + 1 // the device offset of the file's end
	ps := n.vol.cache.pageSize
	padTo := min(end+cs-size%cs, (end+ps-1)/ps*ps)
	if padTo <= end {
		return nil
	}
	if err := n.vol.cache.write(zeroes[:padTo-end], end, end); err != nil {
		return fmt.Errorf("%s: %w", n.path(), err)
	}
	return nil
}

// ensureClusters grows the chain to hold size bytes.
func (n *node) ensureClusters(size int64) error {
	if _, err := n.extents(); err != nil {
		return err
	}
	need := n.vol.clustersFor(size)
	if have := n.clusterCount(); need > have {
		if _, err := n.grow(need - have); err != nil {
			return err
		}
	}
	return nil
}

// zeroRange writes zeros over [from, to) of the file's clusters; from is the file's size.
func (n *node) zeroRange(from, to int64) error {
	for at := from; at < to; {
		k := min(to-at, int64(len(zeroes)))
		if err := n.cacheWrite(zeroes[:k], at, from); err != nil {
			return err
		}
		at += k
		// In the middle of an operation the writer must keep the lock while it waits.
		if dirty, inflight := n.vol.cache.held(); dirty+inflight >= n.vol.opts.CacheBytes {
			if err := n.vol.writebackData(); err != nil {
				return err
			}
		}
	}
	return nil
}

// truncate sets the size. Growing zero-fills; shrinking frees the clusters past the new end, and
// so does truncating to the same size (as Linux, it drops clusters fallocate kept past the end).
func (n *node) truncate(size int64) error {
	if size < 0 || size > MaxFileSize {
		return syscall.EFBIG
	}
	old := int64(n.ent.Size)
	if size > old {
		if err := n.ensureClusters(size); err != nil {
			return err
		}
		if err := n.zeroRange(old, size); err != nil {
			return err
		}
	}
	if _, err := n.extents(); err != nil {
		return err
	}
	if keep := n.vol.clustersFor(size); n.clusterCount() > keep {
		if err := n.shrink(keep); err != nil {
			return err
		}
	}
	n.ent.Size = uint32(size)
	n.touch(true)
	return nil
}

// fallocate allocates clusters for [off, off+length), preferring one contiguous run. Without
// keepSize a range past the end grows the file, zero-filled.
func (n *node) fallocate(off, length int64, keepSize bool) error {
	end := off + length
	if off < 0 || length <= 0 {
		return syscall.EINVAL
	}
	if end > MaxFileSize {
		return syscall.EFBIG
	}
	if err := n.ensureClusters(end); err != nil {
		return err
	}
	if !keepSize && end > int64(n.ent.Size) {
		if err := n.zeroRange(int64(n.ent.Size), end); err != nil {
			return err
		}
		n.ent.Size = uint32(end)
		n.touch(true)
		return nil
	}
	n.storeEntry()
	return nil
}

// touch records a change: the modification time, and for content changes the archive bit.
func (n *node) touch(content bool) {
	now := time.Now()
	n.ent.ModDate, n.ent.ModTime, _ = ondisk.EncodeTime(now, n.vol.loc)
	n.ent.AccessDate = n.ent.ModDate
	if content && !n.isDir() {
		n.ent.Attr |= ondisk.AttrArchive
	}
	n.storeEntry()
}

// freeClusters releases the chain of a node whose entry is gone.
func (n *node) freeClusters() error {
	if _, err := n.extents(); err != nil {
		return err
	}
	n.vol.release(n.ext)
	n.setChain(nil)
	delete(n.vol.orphans, n)
	if n.dir != nil {
		delete(n.vol.dirtyDirs, n.dir)
	}
	return nil
}

// release lets go of clusters an entry no longer points at: their dirty data is forgotten now,
// and they are freed once the entry's change is durable (order.go).
func (v *Volume) release(ext []extent) {
	v.discard(ext)
	v.quarantine(ext)
}

// discard forgets the dirty data cached for clusters: it must never reach the disk, where they may
// by then belong to something else.
func (v *Volume) discard(ext []extent) {
	cs := int64(v.geo.ClusterSize)
	for _, e := range ext {
		v.cache.discard(v.geo.ClusterOffset(e.start), int64(e.count)*cs)
	}
}

// allocate takes n free clusters (see table.allocate). When only quarantined clusters are left,
// it makes their entries' changes durable, which frees them, and tries again.
func (v *Volume) allocate(n, goal uint32) ([]extent, error) {
	got, err := v.fat.allocate(n, goal)
	if errors.Is(err, errNoSpace) && v.order.quarantinedClusters > 0 {
		if err := v.durable(); err != nil {
			return nil, err
		}
		got, err = v.fat.allocate(n, goal)
	}
	return got, err
}

// trimPrealloc frees clusters that fallocate kept past the end of the file, once nothing has it
// open: FAT has no way to record them, and fsck.fat would call the longer chain an error. Linux
// does the same when it evicts the inode (fat_free_eofblocks).
func (n *node) trimPrealloc() error {
	if n.isDir() || !n.chainOK {
		return nil
	}
	if keep := n.vol.clustersFor(int64(n.ent.Size)); n.clusterCount() > keep {
		if err := n.shrink(keep); err != nil {
			return err
		}
		n.storeEntry()
	}
	return nil
}
