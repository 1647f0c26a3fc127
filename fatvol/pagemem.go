package fatvol

import (
	"os"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Page buffers of the cache live outside the Go heap, in chunks mapped from the kernel and handed
// out again as they come back: the garbage collector neither scans nor counts them, so the heap
// it lets grow to twice what is live is the engine's small metadata, not the cache, and a mount's
// memory is its cache bound and little more. Buffers are shared by every volume of the process
// that uses the same page size; the chunks are never unmapped, so a buffer can never be touched
// after its memory went away, but when a volume closes the memory of the free buffers goes back to
// the kernel (trim).

// pageChunk is how much is mapped at a time.
const pageChunk = 1 << 20

var (
	pagePoolsMu sync.Mutex
	pagePools   = map[int64]*pagePool{}
)

// pagePool holds the free page buffers of one page size.
type pagePool struct {
	size int64
	mu   sync.Mutex
	free [][]byte
}

// pagePoolFor returns the pool of buffers of size bytes.
func pagePoolFor(size int64) *pagePool {
	pagePoolsMu.Lock()
	defer pagePoolsMu.Unlock()
	p := pagePools[size]
	if p == nil {
		p = &pagePool{size: size}
		pagePools[size] = p
	}
	return p
}

// get returns a buffer of the pool's size. Its content is whatever it held last.
func (p *pagePool) get() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free = p.free[:k-1]
		return b
	}
	chunk := max(p.size, pageChunk/p.size*p.size)
	mem, err := unix.Mmap(-1, 0, int(chunk), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, p.size) // no mapping to be had: the heap will do
	}
	// Each buffer ends where its page does, so that nothing appends past it into the next.
	for off := p.size; off < chunk; off += p.size {
		p.free = append(p.free, mem[off:off+p.size:off+p.size])
	}
	return mem[:p.size:p.size]
}

// put takes a buffer back.
func (p *pagePool) put(b []byte) {
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
}

// trim gives the memory of the free buffers back to the kernel; their mappings stay, and a buffer
// reads as zeros when it is next used. Called when a volume closes, so that a process that served
// volumes does not keep their caches' worth of memory.
func (p *pagePool) trim() {
	ps := uintptr(os.Getpagesize())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.size < int64(ps) {
		return // buffers smaller than a page share pages with buffers in use
	}
	addr := func(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
	slices.SortFunc(p.free, func(a, b []byte) int {
		switch {
		case addr(a) < addr(b):
			return -1
		case addr(a) > addr(b):
			return 1
		}
		return 0
	})
	// Runs of buffers that follow each other in memory go back in one call.
	for i := 0; i < len(p.free); {
		start := addr(p.free[i])
		end := start + uintptr(p.size)
		j := i + 1
		for j < len(p.free) && addr(p.free[j]) == end {
			end += uintptr(p.size)
			j++
		}
		if start%ps == 0 {
			run := unsafe.Slice(unsafe.SliceData(p.free[i]), end-start)
			_ = unix.Madvise(run, unix.MADV_DONTNEED) // only a hint to the kernel; nothing to undo
		}
		i = j
	}
}
