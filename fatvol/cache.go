package fatvol

import (
	"fmt"
	"slices"
	"sync"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// unitSize is the granularity at which the cache tracks dirty file data: the smallest sector FAT
// has. A cache page may span clusters of different files, or a cluster and metadata, so only the
// units a file wrote are ever written back.
const unitSize = 512

// pageCache holds file data that has been written but not yet written back, in pages of the
// device's block size keyed by device offset. Only dirty data is kept: reads go to the device and
// see dirty units overlaid, so memory is bounded by the dirty limit alone. Writeback detaches the
// dirty pages into a batch, which is written in device order, adjacent dirty units sent as one
// vectored request, while new writes go on into fresh pages: a batch in flight is never changed.
//
// The volume lock guards everything but what a batch finishing touches, which mu guards, so that
// a batch can be written and finished without the volume lock.
type pageCache struct {
	dev      blockdev.Device // the raw device: the caller orders batch writes with other writes
	pageSize int64

	mu       sync.Mutex
	pages    map[int64]*page // dirty pages by page index (device offset / pageSize)
	inflight map[int64]*page // pages of the batch being written
	dirty    int64           // dirty bytes in pages
	buffers  *pagePool       // where page buffers come from and go back to (pagemem.go)
	// done counts finished batches. A read that began before a batch finished may hold the
	// device's old bytes and no longer find the batch's pages to lay over them (see overlay).
	done uint64
}

// batch is a set of detached dirty pages, sorted by index.
type batch struct {
	idxs  []int64
	pages []*page
	bytes int64
}

// page is one cached block; bit i of dirty covers unit i.
type page struct {
	data  []byte
	dirty uint64
}

// newPageCache makes a cache of pages of pageSize bytes. Page buffers come from outside the Go
// heap and go back there, so a long copy neither grows the heap nor leaves garbage (pagemem.go);
// the writers' throttle keeps their number within the volume's bound.
func newPageCache(dev blockdev.Device, pageSize int) *pageCache {
	ps := int64(max(unitSize, min(pageSize, 64*unitSize)))
	return &pageCache{dev: dev, pageSize: ps, pages: map[int64]*page{}, inflight: map[int64]*page{},
		buffers: pagePoolFor(ps)}
}

func (c *pageCache) unitsPerPage() int64 { return c.pageSize / unitSize }

// write copies p into the cache at device offset off. Units that p covers only in part keep their
// other bytes: from the cache when dirty, from the device otherwise, unless keepFrom says that
// bytes at or after that device offset need not be kept (they lie past the end of the file), in
// which case they read as zero and no read is needed.
func (c *pageCache) write(p []byte, off int64, keepFrom int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(p) > 0 {
		idx := off / c.pageSize
		in := off - idx*c.pageSize
		n := min(int64(len(p)), c.pageSize-in)
		pg := c.pages[idx]
		if pg == nil {
			pg = &page{data: c.newBuf()}
			c.pages[idx] = pg
		}
		first, last := in/unitSize, (in+n-1)/unitSize
		// Fill partly written units that hold data worth keeping.
		edges := []int64{first, last}
		if first == last {
			edges = edges[:1]
		}
		for _, u := range edges {
			us := u * unitSize
			covered := in <= us && in+n >= us+unitSize
			if covered || pg.dirty&(1<<u) != 0 {
				continue
			}
			devUnit := idx*c.pageSize + us
			if devUnit >= keepFrom {
				clear(pg.data[us : us+unitSize])
				continue
			}
			// A batch in flight may hold the newest bytes; the device may not have them yet.
			if old := c.inflight[idx]; old != nil && old.dirty&(1<<u) != 0 {
				copy(pg.data[us:us+unitSize], old.data[us:us+unitSize])
				continue
			}
			if _, err := c.dev.ReadAt(pg.data[us:us+unitSize], devUnit); err != nil {
				return fmt.Errorf("read for partial write at %d: %w", devUnit, err)
			}
		}
		copy(pg.data[in:in+n], p[:n])
		for u := first; u <= last; u++ {
			if pg.dirty&(1<<u) == 0 {
				pg.dirty |= 1 << u
				c.dirty += unitSize
			}
		}
		p = p[n:]
		off += n
	}
	return nil
}

// batchesDone is the count of finished batches, to be taken before a read of the device that
// overlay then completes.
func (c *pageCache) batchesDone() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// overlay copies the dirty units that fall in [off, off+len(p)) over p, which was read from the
// device after batchesDone returned done. It returns false, leaving p alone, when a batch finished
// since: its pages are gone from the cache, and the device may have had their bytes only after p
// was read, so p must be read again. Batches are written without the volume lock, so a read
// holding it for reading or writing can meet one finishing.
func (c *pageCache) overlay(p []byte, off int64, done uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != done {
		return false
	}
	if len(c.pages) == 0 && len(c.inflight) == 0 {
		return true
	}
	end := off + int64(len(p))
	for idx := off / c.pageSize; idx*c.pageSize < end; idx++ {
		// Data in flight first, then the newer dirty data over it.
		for _, pg := range []*page{c.inflight[idx], c.pages[idx]} {
			if pg == nil {
				continue
			}
			for u := int64(0); u < c.unitsPerPage(); u++ {
				if pg.dirty&(1<<u) == 0 {
					continue
				}
				us := idx*c.pageSize + u*unitSize
				lo, hi := max(us, off), min(us+unitSize, end)
				if lo < hi {
					copy(p[lo-off:hi-off], pg.data[lo-idx*c.pageSize:hi-idx*c.pageSize])
				}
			}
		}
	}
	return true
}

// discard drops dirty data in [off, off+length): the clusters were freed and their data must
// never reach the disk, where they may by then belong to something else.
func (c *pageCache) discard(off, length int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pages) == 0 {
		return
	}
	end := off + length
	for idx := off / c.pageSize; idx*c.pageSize < end; idx++ {
		pg := c.pages[idx]
		if pg == nil {
			continue
		}
		for u := int64(0); u < c.unitsPerPage(); u++ {
			us := idx*c.pageSize + u*unitSize
			if pg.dirty&(1<<u) != 0 && us >= off && us+unitSize <= end {
				pg.dirty &^= 1 << u
				c.dirty -= unitSize
			}
		}
		if pg.dirty == 0 {
			c.release(idx, pg)
		}
	}
}

// detach takes the dirty pages that intersect [off, off+length) (all of them when length < 0)
// out of the cache into a batch, in flight until complete.
func (c *pageCache) detach(off, length int64) *batch {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &batch{}
	if length < 0 {
		b.idxs = make([]int64, 0, len(c.pages))
		for idx := range c.pages {
			b.idxs = append(b.idxs, idx)
		}
	} else if len(c.pages) > 0 {
		for idx := off / c.pageSize; idx*c.pageSize < off+length; idx++ {
			if c.pages[idx] != nil {
				b.idxs = append(b.idxs, idx)
			}
		}
	}
	slices.Sort(b.idxs)
	for _, idx := range b.idxs {
		pg := c.pages[idx]
		delete(c.pages, idx)
		// No page of an earlier batch is still in flight: the caller holds the volume's
		// write-ordering lock from before detach until after complete.
		c.inflight[idx] = pg
		n := int64(countBits(pg.dirty)) * unitSize
		c.dirty -= n
		b.bytes += n
		b.pages = append(b.pages, pg)
	}
	return b
}

// writeBatch writes a detached batch in device order, adjacent dirty units coalesced into
// requests of at most maxReq bytes. It needs no lock: the batch's pages do not change.
func (c *pageCache) writeBatch(b *batch, maxReq int64) error {
	var (
		bufs  [][]byte
		start int64 = -1
		size  int64
		// The span written since writeback was last started: the medium is asked to start on
		// spans of maxReq or more, not on every request, since a batch of small files is a
		// request per file.
		spanFrom, spanTo int64 = -1, -1
	)
	startSpan := func() error {
		if spanFrom < 0 {
			return nil
		}
		err := c.dev.StartWriteback(spanFrom, spanTo-spanFrom)
		if err != nil {
			err = fmt.Errorf("start writeback of %d bytes at %d: %w", spanTo-spanFrom, spanFrom, err)
		}
		spanFrom, spanTo = -1, -1
		return err
	}
	send := func() error {
		if len(bufs) == 0 {
			return nil
		}
		var err error
		if len(bufs) == 1 {
			_, err = c.dev.WriteAt(bufs[0], start)
		} else {
			_, err = c.dev.WritevAt(bufs, start)
		}
		if err != nil {
			return fmt.Errorf("write back at %d: %w", start, err)
		}
		if spanFrom < 0 {
			spanFrom = start
		}
		spanTo = start + size
		bufs, start, size = bufs[:0], -1, 0
		if spanTo-spanFrom >= maxReq {
			// Let the medium start on it now rather than at the next flush.
			return startSpan()
		}
		return nil
	}
	for i, idx := range b.idxs {
		pg := b.pages[i]
		for u := int64(0); u < c.unitsPerPage(); u++ {
			if pg.dirty&(1<<u) == 0 {
				continue
			}
			at := idx*c.pageSize + u*unitSize
			buf := pg.data[u*unitSize : (u+1)*unitSize]
			if start >= 0 && (start+size != at || size+unitSize > maxReq) {
				if err := send(); err != nil {
					return err
				}
			}
			if start < 0 {
				start = at
			}
			// Units of one page that follow each other share one slice.
			if k := len(bufs); k > 0 && sameArray(bufs[k-1], buf) {
				bufs[k-1] = bufs[k-1][:len(bufs[k-1])+unitSize]
			} else {
				bufs = append(bufs, buf)
			}
			size += unitSize
		}
	}
	if err := send(); err != nil {
		return err
	}
	return startSpan()
}

// complete ends a batch. After a failed write its data is dirty again, under any newer data
// written meanwhile, so nothing is lost and a later writeback tries again.
func (c *pageCache) complete(b *batch, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done++
	for i, idx := range b.idxs {
		old := b.pages[i]
		delete(c.inflight, idx)
		if !failed {
			c.recycle(old)
			continue
		}
		cur := c.pages[idx]
		if cur == nil {
			c.pages[idx] = old
			c.dirty += int64(countBits(old.dirty)) * unitSize
			continue
		}
		for u := int64(0); u < c.unitsPerPage(); u++ {
			if old.dirty&(1<<u) != 0 && cur.dirty&(1<<u) == 0 {
				copy(cur.data[u*unitSize:(u+1)*unitSize], old.data[u*unitSize:(u+1)*unitSize])
				cur.dirty |= 1 << u
				c.dirty += unitSize
			}
		}
		c.recycle(old)
	}
}

// isDirty tells whether the unit that holds device offset off is dirty and not yet in flight.
func (c *pageCache) isDirty(off int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	pg := c.pages[off/c.pageSize]
	return pg != nil && pg.dirty&(1<<(off%c.pageSize/unitSize)) != 0
}

// dirtyBytes is the amount of dirty data not yet in flight.
func (c *pageCache) dirtyBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirty
}

// held is the memory the cache's pages take: the dirty ones, and those of the batch in flight.
func (c *pageCache) held() (dirty, inflight int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.pages)) * c.pageSize, int64(len(c.inflight)) * c.pageSize
}

// sameArray tells whether b starts right where a ends in the same backing array.
func sameArray(a, b []byte) bool {
	return cap(a) > len(a) && len(b) > 0 && &a[:len(a)+1][len(a)] == &b[0]
}

func countBits(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

func (c *pageCache) newBuf() []byte { return c.buffers.get() }

// drop gives every page back to the pool, written or not: the volume is closed.
func (c *pageCache) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range []map[int64]*page{c.pages, c.inflight} {
		for idx, pg := range m {
			delete(m, idx)
			c.recycle(pg)
		}
	}
	c.dirty = 0
	c.buffers.trim()
}

func (c *pageCache) release(idx int64, pg *page) {
	delete(c.pages, idx)
	c.recycle(pg)
}

func (c *pageCache) recycle(pg *page) {
	pg.dirty = 0
	c.buffers.put(pg.data)
	pg.data = nil
}
