package fatvol

import (
	"fmt"
	"slices"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// unitSize is the granularity at which the cache tracks dirty file data: the smallest sector FAT
// has. A cache page may span clusters of different files, or a cluster and metadata, so only the
// units a file wrote are ever written back.
const unitSize = 512

// pageCache holds file data that has been written but not yet written back, in pages of the
// device's block size keyed by device offset. Only dirty data is kept: reads go to the device and
// see dirty units overlaid, so memory is bounded by the dirty limit alone. Writeback walks the
// dirty pages in device order and sends adjacent dirty units as one vectored request.
type pageCache struct {
	dev      blockdev.Device
	pageSize int64
	pages    map[int64]*page // by page index (device offset / pageSize)
	dirty    int64           // dirty bytes
	free     [][]byte        // page buffers to reuse
}

// page is one cached block; bit i of dirty covers unit i.
type page struct {
	data  []byte
	dirty uint64
}

func newPageCache(dev blockdev.Device, pageSize int) *pageCache {
	ps := int64(max(unitSize, min(pageSize, 64*unitSize)))
	return &pageCache{dev: dev, pageSize: ps, pages: map[int64]*page{}}
}

func (c *pageCache) unitsPerPage() int64 { return c.pageSize / unitSize }

// write copies p into the cache at device offset off. Units that p covers only in part keep their
// other bytes: from the cache when dirty, from the device otherwise, unless keepFrom says that
// bytes at or after that device offset need not be kept (they lie past the end of the file), in
// which case they read as zero and no read is needed.
func (c *pageCache) write(p []byte, off int64, keepFrom int64) error {
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

// overlay copies the dirty units that fall in [off, off+len(p)) over p, which was read from the
// device.
func (c *pageCache) overlay(p []byte, off int64) {
	if len(c.pages) == 0 {
		return
	}
	end := off + int64(len(p))
	for idx := off / c.pageSize; idx*c.pageSize < end; idx++ {
		pg := c.pages[idx]
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

// discard drops dirty data in [off, off+length): the clusters were freed and their data must
// never reach the disk, where they may by then belong to something else.
func (c *pageCache) discard(off, length int64) {
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

// dirtyIn tells whether any dirty data lies in [off, off+length).
func (c *pageCache) dirtyIn(off, length int64) bool {
	if len(c.pages) == 0 {
		return false
	}
	for idx := off / c.pageSize; idx*c.pageSize < off+length; idx++ {
		if c.pages[idx] != nil {
			return true
		}
	}
	return false
}

// flushRange writes back the dirty pages that intersect [off, off+length) (whole pages), or all
// of them when length < 0, in device order, coalescing adjacent dirty units into requests of at
// most maxReq bytes.
func (c *pageCache) flushRange(off, length int64, maxReq int64) error {
	var idxs []int64
	if length < 0 {
		idxs = make([]int64, 0, len(c.pages))
		for idx := range c.pages {
			idxs = append(idxs, idx)
		}
	} else {
		for idx := off / c.pageSize; idx*c.pageSize < off+length; idx++ {
			if c.pages[idx] != nil {
				idxs = append(idxs, idx)
			}
		}
	}
	if len(idxs) == 0 {
		return nil
	}
	slices.Sort(idxs)
	var (
		bufs  [][]byte
		start int64 = -1
		size  int64
	)
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
		bufs, start, size = bufs[:0], -1, 0
		return err
	}
	for _, idx := range idxs {
		pg := c.pages[idx]
		for u := int64(0); u < c.unitsPerPage(); u++ {
			if pg.dirty&(1<<u) == 0 {
				continue
			}
			at := idx*c.pageSize + u*unitSize
			b := pg.data[u*unitSize : (u+1)*unitSize]
			if start >= 0 && (start+size != at || size+unitSize > maxReq) {
				if err := send(); err != nil {
					return fmt.Errorf("write back at %d: %w", start, err)
				}
			}
			if start < 0 {
				start = at
			}
			// Units of one page that follow each other share one slice.
			if k := len(bufs); k > 0 && sameArray(bufs[k-1], b) {
				bufs[k-1] = bufs[k-1][:len(bufs[k-1])+unitSize]
			} else {
				bufs = append(bufs, b)
			}
			size += unitSize
		}
	}
	if err := send(); err != nil {
		return fmt.Errorf("write back at %d: %w", start, err)
	}
	// Only now, with everything written, drop the pages: a failed write keeps them dirty.
	for _, idx := range idxs {
		pg := c.pages[idx]
		c.dirty -= int64(countBits(pg.dirty)) * unitSize
		c.release(idx, pg)
	}
	return nil
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

func (c *pageCache) newBuf() []byte {
	if k := len(c.free); k > 0 {
		b := c.free[k-1]
		c.free = c.free[:k-1]
		return b
	}
	return make([]byte, c.pageSize)
}

func (c *pageCache) release(idx int64, pg *page) {
	delete(c.pages, idx)
	if len(c.free) < 256 {
		c.free = append(c.free, pg.data)
	}
}
