package blockdev

import (
	"fmt"
	"math/bits"
	"strings"
	"sync"
)

// NumBuckets is the number of power-of-two size buckets in a Stats histogram. Bucket 0
// holds empty requests; bucket i (i >= 1) holds sizes in (2^(i-2), 2^(i-1)], i.e. a
// request is counted in the bucket of its size rounded up to a power of two. The last
// bucket also takes everything larger.
const NumBuckets = 32

// BucketOf returns the histogram bucket for a request of size bytes.
func BucketOf(size int) int {
	if size <= 0 {
		return 0
	}
	b := bits.Len(uint(size-1)) + 1
	if b >= NumBuckets {
		b = NumBuckets - 1
	}
	return b
}

// BucketLimit returns the largest request size counted in bucket b (0 for bucket 0).
func BucketLimit(b int) int64 {
	if b <= 0 {
		return 0
	}
	return int64(1) << (b - 1)
}

// Stats is a snapshot of a Counting device's counters.
type Stats struct {
	Reads        int64 // read requests (ReadAt calls)
	Writes       int64 // write requests (WriteAt and WritevAt calls; a WritevAt is one)
	BytesRead    int64 // bytes actually read
	BytesWritten int64 // bytes actually written
	Flushes      int64 // Flush calls
	ReadSizes    [NumBuckets]int64
	WriteSizes   [NumBuckets]int64
}

// AvgWriteSize is the mean number of bytes written per write request (0 with no writes):
// the figure that tells whether the engine is coalescing.
func (s Stats) AvgWriteSize() float64 {
	if s.Writes == 0 {
		return 0
	}
	return float64(s.BytesWritten) / float64(s.Writes)
}

// AvgReadSize is the mean number of bytes read per read request (0 with no reads).
func (s Stats) AvgReadSize() float64 {
	if s.Reads == 0 {
		return 0
	}
	return float64(s.BytesRead) / float64(s.Reads)
}

// Sub returns s - o, for measuring one phase of a test without Reset.
func (s Stats) Sub(o Stats) Stats {
	r := Stats{
		Reads:        s.Reads - o.Reads,
		Writes:       s.Writes - o.Writes,
		BytesRead:    s.BytesRead - o.BytesRead,
		BytesWritten: s.BytesWritten - o.BytesWritten,
		Flushes:      s.Flushes - o.Flushes,
	}
	for i := range r.ReadSizes {
		r.ReadSizes[i] = s.ReadSizes[i] - o.ReadSizes[i]
		r.WriteSizes[i] = s.WriteSizes[i] - o.WriteSizes[i]
	}
	return r
}

// String prints a compact table: totals, then one row per non-empty size bucket.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reads %d (%s, avg %s)  writes %d (%s, avg %s)  flushes %d\n",
		s.Reads, humanBytes(float64(s.BytesRead)), humanBytes(s.AvgReadSize()),
		s.Writes, humanBytes(float64(s.BytesWritten)), humanBytes(s.AvgWriteSize()),
		s.Flushes)
	header := false
	for i := 0; i < NumBuckets; i++ {
		if s.ReadSizes[i] == 0 && s.WriteSizes[i] == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(&b, "%10s %10s %10s\n", "size<=", "reads", "writes")
			header = true
		}
		fmt.Fprintf(&b, "%10s %10d %10d\n", humanBytes(float64(BucketLimit(i))), s.ReadSizes[i], s.WriteSizes[i])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func humanBytes(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.1fG", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.1fM", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1fK", v/(1<<10))
	default:
		return fmt.Sprintf("%.0fB", v)
	}
}

// Counting wraps a Device and counts the requests that reach it, so tests and benchmarks
// can assert on device traffic (request count, sizes, flushes) rather than on timing.
// Safe for concurrent use; a mutex (not per-field atomics) keeps each snapshot consistent.
type Counting struct {
	Device
	mu sync.Mutex
	s  Stats
}

var _ Device = (*Counting)(nil)

// NewCounting wraps d.
func NewCounting(d Device) *Counting { return &Counting{Device: d} }

// Stats returns a snapshot of the counters.
func (c *Counting) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

// Reset zeroes the counters.
func (c *Counting) Reset() {
	c.mu.Lock()
	c.s = Stats{}
	c.mu.Unlock()
}

// ReadAt counts one read request of len(p) bytes and the bytes actually read.
func (c *Counting) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.Device.ReadAt(p, off)
	c.mu.Lock()
	c.s.Reads++
	c.s.BytesRead += int64(n)
	c.s.ReadSizes[BucketOf(len(p))]++
	c.mu.Unlock()
	return n, err
}

// WriteAt counts one write request.
func (c *Counting) WriteAt(p []byte, off int64) (int, error) {
	n, err := c.Device.WriteAt(p, off)
	c.countWrite(len(p), n)
	return n, err
}

// WritevAt counts one write request whose size is the sum of the buffers.
func (c *Counting) WritevAt(bufs [][]byte, off int64) (int, error) {
	size := 0
	for _, b := range bufs {
		size += len(b)
	}
	n, err := c.Device.WritevAt(bufs, off)
	c.countWrite(size, n)
	return n, err
}

func (c *Counting) countWrite(size, n int) {
	c.mu.Lock()
	c.s.Writes++
	c.s.BytesWritten += int64(n)
	c.s.WriteSizes[BucketOf(size)]++
	c.mu.Unlock()
}

// Flush counts one flush.
func (c *Counting) Flush() error {
	err := c.Device.Flush()
	c.mu.Lock()
	c.s.Flushes++
	c.mu.Unlock()
	return err
}
