// Package blockdev is the device layer under the FAT engine: one small positional-I/O
// interface over image files and whole block devices, plus wrappers that count requests
// (Counting) and inject faults (Faulty) for tests and benchmarks.
package blockdev

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Device is positional block storage: an image file or a whole block device.
type Device interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// WritevAt writes bufs back to back starting at off as ONE device request (pwritev), so the
	// engine can coalesce adjacent dirty blocks. Counts as one write request.
	WritevAt(bufs [][]byte, off int64) (int, error)
	// StartWriteback asks the OS to start writing [off, off+length) to the medium without
	// waiting (sync_file_range), so the device works while the engine goes on and a later
	// Flush has little left to do. A hint: it makes nothing durable.
	StartWriteback(off, length int64) error
	Flush() error          // durable: fdatasync
	Size() int64           // bytes
	LogicalBlockSize() int // 512 for image files; BLKSSZGET for block devices
	BlockSize() int        // the chosen I/O block size (see ChooseBlockSize)
	Close() error
}

// Sentinel errors, wrapped (with the path and offset) by File's methods so callers can
// tell a programming error from an I/O error with errors.Is.
var (
	// ErrOutOfRange: a write (or a read at a negative offset) that does not fit in Size().
	// The engine never grows a device; CreateImage sets an image's size, and UpdateSize reads a
	// grown one again.
	ErrOutOfRange = errors.New("out of device range")
	// ErrReadOnly: a write on a device opened read-only.
	ErrReadOnly = errors.New("device opened read-only")
	// ErrNotBlockDevice: Open was given something that is neither a regular file nor a
	// block device (a directory, a character device, a FIFO...).
	ErrNotBlockDevice = errors.New("not a regular file or block device")
)

const (
	// ImageLogicalBlockSize is the logical block size reported for image files: the sector
	// size FAT tools assume when nothing says otherwise.
	ImageLogicalBlockSize = 512
	// MaxBlockSize caps SetBlockSize: FAT clusters are at most 64 KiB, so larger I/O blocks
	// would only add read-modify-write amplification.
	MaxBlockSize = 64 << 10
	// maxIov is Linux's IOV_MAX; pwritev refuses more iovecs than this in one call.
	maxIov = 1024
)

// ChooseBlockSize picks the I/O block size the way Linux's set_init_blocksize does (the
// 2021 revert that regained lost write speed): start at the logical block size and double
// while below the page size and the device size is a multiple of the doubled size. The
// result is the largest power of two up to pageSize that divides size, never below
// logical. Bigger blocks mean fewer, larger requests; dividing the size means the last
// block is never partial.
func ChooseBlockSize(size int64, logical, pageSize int) int {
	bsize := logical
	if bsize <= 0 {
		bsize = ImageLogicalBlockSize
	}
	for bsize < pageSize {
		if size&int64(bsize) != 0 {
			break
		}
		bsize <<= 1
	}
	return bsize
}

// File is a Device backed by an image file or a block device node.
type File struct {
	f         *os.File
	path      string
	size      atomic.Int64 // read by I/O while UpdateSize may set it
	logical   int
	blockSize int
	readOnly  bool
	isBlock   bool
	claim     Claim
	writer    string // Shared: who held the medium for writing at open, or ""

	// The span whose writeback StartWriteback started last, which the next one waits for.
	spanMu           sync.Mutex
	spanOff, spanLen int64

	// direct reads and writes large aligned extents with O_DIRECT (direct.go), when attached.
	directMu sync.Mutex
	direct   *directTwin
}

var _ Device = (*File)(nil)

// Open opens an image file or a block device (detected by stat): readOnly opens it Shared,
// else Exclusive, claiming it for as long as it is open (OpenClaimed). The size is read at open,
// and again only at UpdateSize: an image grown while open becomes usable when its volume grows.
func Open(path string, readOnly bool) (*File, error) {
	if readOnly {
		return OpenClaimed(path, Shared)
	}
	return OpenClaimed(path, Exclusive)
}

// OpenClaimed opens an image file or a block device with the given claim (see Claim). A medium
// another writer holds is refused with an *InUseError (errors.Is ErrInUse) naming the holder
// where it can be found, and nothing is written to it.
func OpenClaimed(path string, claim Claim) (*File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("blockdev %s: %w", path, err)
	}
	mode := st.Mode()
	isBlock := mode&os.ModeDevice != 0 && mode&os.ModeCharDevice == 0
	if !isBlock && !mode.IsRegular() {
		return nil, fmt.Errorf("blockdev %s: mode %v: %w", path, mode, ErrNotBlockDevice)
	}
	f, err := openClaimed(path, isBlock, claim)
	if err != nil {
		return nil, err
	}
	return newFile(f, path, isBlock, claim)
}

// FromFile wraps an image file or block device that is already open, e.g. one received from
// the process that opened and claimed it: the claim belongs to the open file description, so
// it came along with the descriptor. claim says how f was opened (Shared: refuse writes). The
// File owns f from then on, even when FromFile fails.
func FromFile(f *os.File, path string, claim Claim) (*File, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blockdev %s: %w", path, err)
	}
	mode := st.Mode()
	isBlock := mode&os.ModeDevice != 0 && mode&os.ModeCharDevice == 0
	if !isBlock && !mode.IsRegular() {
		f.Close()
		return nil, fmt.Errorf("blockdev %s: mode %v: %w", path, mode, ErrNotBlockDevice)
	}
	return newFile(f, path, isBlock, claim)
}

// newFile probes an open descriptor and makes it a File, closing f on failure.
func newFile(f *os.File, path string, isBlock bool, claim Claim) (*File, error) {
	d := &File{f: f, path: path, readOnly: claim != Exclusive && claim != Beside, isBlock: isBlock, claim: claim}
	if err := d.probe(); err != nil {
		f.Close()
		return nil, err
	}
	d.blockSize = ChooseBlockSize(d.size.Load(), d.logical, os.Getpagesize())
	if claim == Shared {
		d.writer = otherWriter(f, path, isBlock)
	}
	return d, nil
}

// probe fills size and logical from the open descriptor: fstat for image files,
// BLKGETSIZE64/BLKSSZGET for block devices (whose st_size is 0).
func (d *File) probe() error {
	if !d.isBlock {
		st, err := d.f.Stat()
		if err != nil {
			return fmt.Errorf("blockdev %s: %w", d.path, err)
		}
		d.size.Store(st.Size())
		d.logical = ImageLogicalBlockSize
		return nil
	}
	var size uint64
	var lbs uint32
	var ierr error
	err := d.control(func(fd int) {
		if size, ierr = unix.IoctlGetUint64(fd, unix.BLKGETSIZE64); ierr != nil {
			ierr = fmt.Errorf("BLKGETSIZE64: %w", ierr)
			return
		}
		if lbs, ierr = unix.IoctlGetUint32(fd, unix.BLKSSZGET); ierr != nil {
			ierr = fmt.Errorf("BLKSSZGET: %w", ierr)
		}
	})
	if err == nil {
		err = ierr
	}
	if err != nil {
		return fmt.Errorf("blockdev %s: %w", d.path, err)
	}
	if lbs == 0 || bits.OnesCount32(lbs) != 1 {
		return fmt.Errorf("blockdev %s: implausible logical block size %d", d.path, lbs)
	}
	d.size.Store(int64(size))
	d.logical = int(lbs)
	return nil
}

// CreateImage creates (or extends, never shrinks) a sparse image file of exactly size bytes
// and opens it Exclusive. Extending uses ftruncate so no data blocks are allocated; an existing
// larger image is left alone, since shrinking would silently destroy a volume. The claim is
// taken before the size is touched, so an image another writer holds is left as it was.
func CreateImage(path string, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("blockdev %s: create with size %d: %w", path, size, ErrOutOfRange)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("blockdev %s: create: %w", path, err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("mode %v: %w", st.Mode(), ErrNotBlockDevice)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blockdev %s: create: %w", path, err)
	}
	if err := lockImage(f, path, Exclusive); err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() < size {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("blockdev %s: create: %w", path, err)
		}
	}
	return newFile(f, path, false, Exclusive)
}

// control runs fn with the raw descriptor while holding a reference to it, so a
// concurrent Close cannot recycle the fd number under a syscall.
func (d *File) control(fn func(fd int)) error { return controlFile(d.f, fn) }

// Path returns the path the device was opened with.
func (d *File) Path() string { return d.path }

// IsBlockDevice reports whether the path is a block device rather than an image file.
func (d *File) IsBlockDevice() bool { return d.isBlock }

// ReadOnly reports whether the device refuses writes (opened Shared or ExclusiveReadOnly).
func (d *File) ReadOnly() bool { return d.readOnly }

// Claim returns how the device was opened.
func (d *File) Claim() Claim { return d.claim }

// Writer names who held the medium for writing when it was opened Shared (e.g. "pid 1234,
// csi-fat mount", "mounted at /mnt"), so the caller can warn that what it reads may be changing;
// "" when nobody did, or when the device was opened with a claim of its own.
func (d *File) Writer() string { return d.writer }

// OSFile returns the open file whose description holds the claim. Its descriptor may be handed
// to another process (ExtraFiles, SCM_RIGHTS; the receiver wraps it with FromFile): an OFD lock
// and an O_EXCL open belong to the open file description, not to a process, so the claim goes
// with it and lasts until the last descriptor of that description is closed. Closing d closes it.
func (d *File) OSFile() *os.File { return d.f }

// Size returns the device size in bytes.
func (d *File) Size() int64 { return d.size.Load() }

// LogicalBlockSize returns 512 for image files and BLKSSZGET for block devices.
func (d *File) LogicalBlockSize() int { return d.logical }

// BlockSize returns the I/O block size: ChooseBlockSize's pick unless overridden.
func (d *File) BlockSize() int { return d.blockSize }

// SetBlockSize overrides the chosen I/O block size, e.g. to match the FAT cluster size.
// n must be a power of two, at least the logical block size and at most 64 KiB. It is not
// required to divide Size(); callers doing so accept a partial last block. Not safe to
// call concurrently with I/O that uses BlockSize.
func (d *File) SetBlockSize(n int) error {
	if n <= 0 || n&(n-1) != 0 || n < d.logical || n > MaxBlockSize {
		return fmt.Errorf("blockdev %s: block size %d: want a power of two in [%d, %d]",
			d.path, n, d.logical, MaxBlockSize)
	}
	d.blockSize = n
	return nil
}

// ReadAt reads len(p) bytes at off. Like os.File, a read that reaches Size() returns the
// bytes before the end and io.EOF; reads are clamped to Size() so a block device behaves
// the same as an image file.
func (d *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("blockdev %s: read at %d: %w", d.path, off, ErrOutOfRange)
	}
	size := d.size.Load()
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	short := false
	if rem := size - off; int64(len(p)) > rem {
		p = p[:rem]
		short = true
	}
	n, err := d.readAt(p, off)
	if err == io.EOF {
		// The file shrank under us (someone truncated the image): report it as EOF, like os.File.
		return n, io.EOF
	}
	if err != nil {
		return n, fmt.Errorf("blockdev %s: read at %d: %w", d.path, off, err)
	}
	if short {
		return n, io.EOF
	}
	return n, nil
}

// readAt reads large aligned extents through the direct twin when it reads (direct.go), the
// rest through the page cache.
func (d *File) readAt(p []byte, off int64) (int, error) {
	d.directMu.Lock()
	w := d.direct
	d.directMu.Unlock()
	if w != nil && len(p) > 0 {
		if n, ok, err := w.readAt(p, off); ok {
			return n, err
		}
	}
	return d.f.ReadAt(p, off)
}

// checkWrite refuses writes the engine must never issue: on a read-only handle, or
// extending past Size() (a block device cannot grow, and an image is sized by CreateImage).
func (d *File) checkWrite(n int64, off int64) error {
	if d.readOnly {
		return fmt.Errorf("blockdev %s: write at %d: %w", d.path, off, ErrReadOnly)
	}
	size := d.size.Load()
	if off < 0 || n > size || off > size-n {
		return fmt.Errorf("blockdev %s: write of %d bytes at %d past size %d: %w",
			d.path, n, off, size, ErrOutOfRange)
	}
	return nil
}

// WriteAt writes p at off, entirely within Size().
func (d *File) WriteAt(p []byte, off int64) (int, error) {
	if err := d.checkWrite(int64(len(p)), off); err != nil {
		return 0, err
	}
	n, err := d.f.WriteAt(p, off)
	if err != nil {
		return n, fmt.Errorf("blockdev %s: write at %d: %w", d.path, off, err)
	}
	return n, nil
}

// WritevAt writes bufs back to back at off with pwritev, one syscall per 1024 buffers
// (IOV_MAX) and more only on short writes, so coalesced dirty blocks reach the device as
// one request.
func (d *File) WritevAt(bufs [][]byte, off int64) (int, error) {
	var total int64
	iovs := make([][]byte, 0, len(bufs))
	for _, b := range bufs {
		if len(b) > 0 {
			iovs = append(iovs, b)
			total += int64(len(b))
		}
	}
	if err := d.checkWrite(total, off); err != nil {
		return 0, err
	}
	d.directMu.Lock()
	w := d.direct
	d.directMu.Unlock()
	if w != nil {
		n, ok, err := w.writev(iovs, total, off)
		if err != nil {
			return n, fmt.Errorf("blockdev %s: direct write at %d: %w", d.path, off+int64(n), err)
		}
		if ok {
			return n, nil
		}
	}
	written := 0
	var werr error
	cerr := d.control(func(fd int) {
		for len(iovs) > 0 {
			batch := iovs
			if len(batch) > maxIov {
				batch = batch[:maxIov]
			}
			n, err := unix.Pwritev(fd, batch, off+int64(written))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				werr = err
				return
			}
			if n == 0 {
				werr = io.ErrShortWrite
				return
			}
			written += n
			// Drop the fully written buffers and trim the partly written one.
			for n > 0 {
				if n >= len(iovs[0]) {
					n -= len(iovs[0])
					iovs = iovs[1:]
				} else {
					iovs[0] = iovs[0][n:]
					n = 0
				}
			}
		}
	})
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		return written, fmt.Errorf("blockdev %s: writev at %d: %w", d.path, off+int64(written), werr)
	}
	return written, nil
}

// Flush makes written data durable with fdatasync: the engine only needs data and the
// metadata required to read it back (the size never changes), not timestamps.
func (d *File) Flush() error {
	var serr error
	err := d.control(func(fd int) {
		for {
			serr = unix.Fdatasync(fd)
			if serr != unix.EINTR {
				return
			}
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("blockdev %s: flush: %w", d.path, err)
	}
	return nil
}

// Close closes the underlying descriptor (and its direct twin). It does not flush: call Flush
// first.
func (d *File) Close() error {
	d.directMu.Lock()
	if d.direct != nil {
		d.direct.close()
		d.direct = nil
	}
	d.directMu.Unlock()
	if err := d.f.Close(); err != nil {
		return fmt.Errorf("blockdev %s: close: %w", d.path, err)
	}
	return nil
}
