package prober

import (
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/csi-fat/csi-fat/node/media"
	"golang.org/x/sys/unix"
)

// cache keeps the last look at each device for CacheTTL, and makes looks at
// one device at once share one prober. Its zero value is ready.
type cache struct {
	mu      sync.Mutex
	entries map[string]*cacheEntry // by device path
}

// cacheKey is what must not change for a look at a device to be reused.
type cacheKey struct {
	id, kernel string
	size       int64
	lbs        int
	rdev       uint64 // the device number
	diskseq    uint64 // the kernel's disk sequence number: new for each medium a device gets
}

// cacheEntry is one look; report and err are set before done is closed.
type cacheEntry struct {
	key    cacheKey
	start  time.Time
	done   chan struct{}
	report *Result
	err    error
}

func (e *cacheEntry) finished() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// get returns the look at d (open as f) started less than CacheTTL ago, waits for the one
// under way, or takes one with probe.
func (c *cache) get(f *os.File, d media.Device, lbs int, probe func() (*Result, error)) (*Result, error) {
	key := cacheKey{id: d.ID, kernel: d.Kernel, size: d.Size, lbs: lbs}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil {
		key.rdev = st.Rdev
	}
	key.diskseq = DiskSeq(f)
	c.mu.Lock()
	if e := c.entries[d.Path]; e != nil && e.key == key && (!e.finished() || time.Since(e.start) < CacheTTL) {
		c.mu.Unlock()
		<-e.done
		return e.report, e.err
	}
	if c.entries == nil {
		c.entries = map[string]*cacheEntry{}
	}
	for p, e := range c.entries {
		if e.finished() && time.Since(e.start) >= CacheTTL {
			delete(c.entries, p)
		}
	}
	e := &cacheEntry{key: key, start: time.Now(), done: make(chan struct{})}
	c.entries[d.Path] = e
	c.mu.Unlock()
	e.report, e.err = probe()
	close(e.done)
	return e.report, e.err
}

// forget drops the look at the device at path, and the one under way: the device is being
// written, so what they saw is not kept (those waiting for the one under way still get it).
func (c *cache) forget(path string) {
	c.mu.Lock()
	delete(c.entries, path)
	c.mu.Unlock()
}

// blkGetDiskSeq is BLKGETDISKSEQ, _IOR(0x12, 128, __u64) (Linux 5.15).
const blkGetDiskSeq = 0x80081280

// DiskSeq is the disk sequence number of the block device open as f, 0 where there is none (an
// image file, an older kernel).
func DiskSeq(f *os.File) uint64 {
	var seq uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), blkGetDiskSeq, uintptr(unsafe.Pointer(&seq))); errno != 0 {
		return 0
	}
	return seq
}
