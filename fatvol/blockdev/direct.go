package blockdev

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Large writes go to the medium with O_DIRECT, through a second descriptor of the same file,
// from one buffer of physically contiguous memory (huge pages where the kernel gives them). A
// buffered write reaches the device as the page cache's pages, each a segment of the request,
// so a request ends at the queue's segment limit (128 pages, 512 KiB on a loop device) however
// much the queue takes; one O_DIRECT write from contiguous memory fills requests up to the
// queue's max_sectors_kb. The device's page cache then holds no second copy of what the engine
// writes, which in a memory-limited mounter is memory that counts against its limit.
//
// Large reads (what the kernel's read ahead asks of a FUSE mount) come through the same twin
// when it is open for reading too, straight into the reply's buffer: what is read lands in the
// mount's own page cache, where the reader needs it, and not a second time in the device's, whose
// filling cost the server more CPU than the rest of the read (a 1 GiB file read cold after a
// copy: 1.1-2.4 s of server CPU buffered, 0.3-0.4 s direct). Small reads (random 4 KiB reads,
// directory clusters of most volumes) and metadata stay buffered. The kernel keeps the two paths
// coherent: a direct write writes back and drops the cached pages of its range, a direct read
// writes back the dirty cached pages of its range first.

const (
	// directMin is the smallest write worth the copy into the direct buffer: smaller ones are
	// metadata sectors and short files' tails, which the page cache merges well enough.
	directMin = 256 << 10
	// directChunk is the direct buffer's size, what one pwrite carries: two huge pages.
	directChunk = 4 << 20
	hugePage    = 2 << 20
	// directReadMin is the smallest read that skips the device's page cache: the kernel's read
	// ahead of a FUSE mount asks for 128 KiB and more at a time, random reads for a page.
	directReadMin = 64 << 10
)

// directTwin reads and writes large extents through an O_DIRECT descriptor of the device, writes
// from its buffer.
type directTwin struct {
	f     *os.File
	align int64 // offsets and lengths must be multiples of it (STATX_DIOALIGN, or the logical block size)

	// fMu keeps f open while a read uses it (reads do not take mu, so that they do not wait for
	// a write's copy and pwrite); close takes it for writing.
	fMu sync.RWMutex
	mu  sync.Mutex // one write at a time uses buf
	buf []byte     // directChunk bytes of mem, aligned to a huge page
	mem []byte     // the mapping
	// refused: the medium answered EINVAL to a direct write; everything goes through the page
	// cache from then on. readRefused: the same for a direct read.
	refused     bool
	readRefused atomic.Bool
	writes      atomic.Int64 // direct pwrites issued, for tests
	// readable, writable: the twin's access; large aligned reads and writes go through it
	// when it allows them.
	readable, writable bool
	reads              atomic.Int64 // direct preads issued, for tests
}

// readAt reads p at off with O_DIRECT when it suits: ok is false when it does not (too small,
// unaligned on the medium or in memory, a twin for writing only, direct reads refused), and then
// nothing was read and the caller reads through the page cache.
func (w *directTwin) readAt(p []byte, off int64) (n int, ok bool, err error) {
	if !w.readable || len(p) < directReadMin || off%w.align != 0 || int64(len(p))%w.align != 0 ||
		int64(uintptr(unsafe.Pointer(&p[0])))%w.align != 0 || w.readRefused.Load() {
		return 0, false, nil
	}
	w.fMu.RLock()
	defer w.fMu.RUnlock()
	if w.f == nil {
		return 0, false, nil
	}
	for n < len(p) {
		m, err := unix.Pread(int(w.f.Fd()), p[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err == unix.EINVAL && n == 0 {
			w.readRefused.Store(true) // the medium refuses direct reads after all: never again
			return 0, false, nil
		}
		if err != nil {
			return n, true, err
		}
		if m == 0 {
			return n, true, io.EOF
		}
		w.reads.Add(1)
		n += m
	}
	return n, true, nil
}

// OpenDirectTwin opens f's file again with O_DIRECT, for reading and writing, or for reading
// alone unless writable: a descriptor to hand to AttachDirect (by a process that may open the
// device, for one that may not) of a File open for writing, or for reading alone. The twin
// carries no claim: f's claim covers the medium.
func OpenDirectTwin(f *os.File, writable bool) (*os.File, error) {
	mode := os.O_RDONLY
	if writable {
		mode = os.O_RDWR
	}
	var twin *os.File
	var oerr error
	err := controlFile(f, func(fd int) {
		twin, oerr = os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), mode|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	})
	if err == nil {
		err = oerr
	}
	if err != nil {
		return nil, fmt.Errorf("open %s for direct writes: %w", f.Name(), err)
	}
	return twin, nil
}

// AttachDirect makes d write and read large aligned extents through twin, an O_DIRECT
// descriptor of the same file (OpenDirectTwin): writes when twin is open for writing, reads when
// it is open for reading. A read-only File takes a twin open for reading alone. d owns twin from
// then on, even when AttachDirect fails; a File without one reads and writes everything through
// the page cache, as before.
func (d *File) AttachDirect(twin *os.File) error {
	w, err := d.newDirectTwin(twin)
	if err != nil {
		twin.Close()
		return fmt.Errorf("blockdev %s: direct writes: %w", d.path, err)
	}
	d.directMu.Lock()
	defer d.directMu.Unlock()
	if d.direct != nil {
		w.close()
		return fmt.Errorf("blockdev %s: direct writes: already attached", d.path)
	}
	d.direct = w
	return nil
}

// OpenDirect attaches a direct twin this process opens itself (it must be allowed to open the
// device; an unprivileged mounter gets its twin from the plugin instead).
func (d *File) OpenDirect() error {
	twin, err := OpenDirectTwin(d.f, !d.readOnly)
	if err != nil {
		return fmt.Errorf("blockdev %s: %w", d.path, err)
	}
	return d.AttachDirect(twin)
}

// DirectWrites tells whether large writes go to the medium with O_DIRECT.
func (d *File) DirectWrites() bool {
	d.directMu.Lock()
	defer d.directMu.Unlock()
	return d.direct != nil && d.direct.writable
}

// DirectReads tells whether large reads come from the medium with O_DIRECT.
func (d *File) DirectReads() bool {
	d.directMu.Lock()
	defer d.directMu.Unlock()
	return d.direct != nil && d.direct.readable
}

// newDirectTwin checks that twin is the same file as d's, open with O_DIRECT for what d may do
// (for reading alone when d is read-only, for writing otherwise), and finds the alignment direct
// I/O on it needs.
func (d *File) newDirectTwin(twin *os.File) (*directTwin, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(twin.Fd()), &a); err != nil {
		return nil, err
	}
	if err := d.control(func(fd int) { _ = unix.Fstat(fd, &b) }); err != nil {
		return nil, err
	}
	if a.Dev != b.Dev || a.Ino != b.Ino || a.Rdev != b.Rdev {
		return nil, errors.New("the descriptor is of another file")
	}
	flags, err := unix.FcntlInt(twin.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return nil, err
	}
	acc := flags & unix.O_ACCMODE
	switch {
	case flags&unix.O_DIRECT == 0:
		return nil, errors.New("the descriptor is not open with O_DIRECT")
	case d.readOnly && acc != unix.O_RDONLY:
		// What serves a read-only volume gets no way to write its medium.
		return nil, errors.New("the descriptor is open for writing, the medium for reading only")
	case !d.readOnly && acc == unix.O_RDONLY:
		return nil, errors.New("the descriptor is not open for writing")
	}
	// A twin for writing only (from a plugin before direct reads) leaves reads buffered.
	readable, writable := acc != unix.O_WRONLY, acc != unix.O_RDONLY
	align := int64(d.logical)
	if !d.isBlock {
		var stx unix.Statx_t
		if err := unix.Statx(int(twin.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &stx); err != nil {
			return nil, err
		}
		if stx.Mask&unix.STATX_DIOALIGN == 0 || stx.Dio_offset_align == 0 {
			return nil, errors.New("its file system does not do direct I/O")
		}
		align = max(int64(stx.Dio_offset_align), int64(stx.Dio_mem_align))
	}
	if align <= 0 || align > directChunk || directChunk%align != 0 {
		return nil, fmt.Errorf("implausible direct I/O alignment %d", align)
	}
	return &directTwin{f: twin, align: align, readable: readable, writable: writable}, nil
}

// writev writes bufs back to back at off with O_DIRECT when the extent suits it. ok is false
// when it does not (too small, unaligned, or direct I/O refused at the first try), and then
// nothing was written: the caller writes through the page cache.
func (w *directTwin) writev(bufs [][]byte, total, off int64) (n int, ok bool, err error) {
	if !w.writable || total < directMin || off%w.align != 0 || total%w.align != 0 {
		return 0, false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refused || w.f == nil {
		return 0, false, nil
	}
	if w.buf == nil {
		if w.buf, w.mem, err = hugeBuffer(directChunk); err != nil {
			return 0, false, nil // no memory to map: the page cache will do
		}
	}
	var written int64
	i, pos := 0, 0 // the next byte to copy: bufs[i][pos]
	for i < len(bufs) {
		fill := 0
		for i < len(bufs) && fill < len(w.buf) {
			c := copy(w.buf[fill:], bufs[i][pos:])
			fill += c
			if pos += c; pos == len(bufs[i]) {
				i, pos = i+1, 0
			}
		}
		for done := 0; done < fill; {
			m, err := unix.Pwrite(int(w.f.Fd()), w.buf[done:fill], off+written)
			if err == unix.EINTR {
				continue
			}
			if err == unix.EINVAL && written == 0 {
				w.refused = true // the medium refuses direct I/O after all: never again
				return 0, false, nil
			}
			if err != nil {
				return int(written), true, err
			}
			if m == 0 {
				return int(written), true, unix.EIO
			}
			w.writes.Add(1)
			done += m
			written += int64(m)
		}
	}
	return int(written), true, nil
}

func (w *directTwin) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mem != nil {
		_ = unix.Munmap(w.mem)
		w.buf, w.mem = nil, nil
	}
	w.fMu.Lock()
	f := w.f
	w.f = nil
	w.fMu.Unlock()
	return f.Close()
}

// hugeBuffer maps size bytes (a multiple of huge pages) aligned to a huge page and asks for
// huge pages, so that its memory is physically contiguous where the kernel can give that.
func hugeBuffer(size int) (buf, mem []byte, err error) {
	mem, err = unix.Mmap(-1, 0, size+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, err
	}
	start := (hugePage - int(uintptr(unsafe.Pointer(&mem[0]))%hugePage)) % hugePage
	buf = mem[start : start+size : start+size]
	_ = unix.Madvise(buf, unix.MADV_HUGEPAGE) // a hint: without huge pages requests are smaller, not wrong
	return buf, mem, nil
}
