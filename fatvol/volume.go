// Package fatvol is csi-fat's userspace FAT12/16/32 engine: it opens a volume on a blockdev.Device
// and offers it for reading through io/fs and for writing through a small API in the same spirit
// (OpenFile, Mkdir, Remove, Rename, ...). It imports nothing from Kubernetes.
package fatvol

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Options configure an opened volume. The zero value is the recommended configuration; the
// knobs exist so that benchmarks can show each behaviour against the kernel's stock one with the
// same code.
type Options struct {
	ReadOnly bool
	// ShortName selects how short names are created and shown, as Linux's shortname= option.
	ShortName ondisk.ShortNameMode
	// CodePage is the OEM code page short names are created and read in (vfat's codepage=);
	// nil means 437 (ondisk.LookupCodePage).
	CodePage *ondisk.CodePage
	// Location is the time zone of FAT's local timestamps; nil means time.Local, as Linux and mtools.
	Location *time.Location
	// Logger receives open-time facts (geometry, block size); nil means slog.Default().
	Logger *slog.Logger
	// BlockSize overrides the device layer's choice of I/O block size (0 keeps it).
	BlockSize int

	// CacheBytes bounds the file data held in memory, dirty pages and the batch being written
	// together (0: DefaultCacheBytes). Past half of it the background writer starts; at the bound
	// a writer waits for the batch in flight, or with none writes back, before going on.
	CacheBytes int64
	// DirCacheBytes bounds the directories held in memory, about (0: DefaultDirCacheBytes): past
	// it, at the end of an operation, those nothing needs (no open file or loaded directory in
	// them, nothing to write back) are dropped, least recently used first, and read again when
	// next used (dircache.go).
	DirCacheBytes int64
	// MaxRequest bounds one coalesced device write (0: DefaultMaxRequest).
	MaxRequest int64
	// DirtyExpire is how old dirty data may get before the background writer writes everything
	// back (0: DefaultDirtyExpire).
	DirtyExpire time.Duration

	// Sync makes every operation durable when it returns, like the sync mount option.
	Sync bool
	// MirrorPerSector, with Sync, writes each FAT sector to each copy as its own synchronous
	// request, as Linux did before batching its mirror writes. Only for comparison.
	MirrorPerSector bool
	// Flush starts writeback of a file's dirty data when it is closed, like vfat's flush option.
	Flush bool
	// FlushNoWait makes close return without waiting for that writeback (the kernel thread's
	// wait=0); unmount and fsync still wait for everything.
	FlushNoWait bool
	// ContinueAfterDeviceError keeps writing after the device failed a write or flush, as the
	// errors=continue mount option. By default the volume then takes no more writes (Err).
	ContinueAfterDeviceError bool
	// EntryPerWrite writes a file's directory entry after every write that changes it, instead of
	// leaving it to writeback, and without the write order's flushes, as the kernel's stock driver.
	// Only for comparison.
	EntryPerWrite bool
	// Checked tells that the caller checked (or repaired) the volume just before this open and
	// found nothing wrong but the dirty bit, so a clean Close may clear a dirty bit found at open.
	// Without it that bit stays, as Linux vfat leaves it: only a check may say the volume is whole.
	Checked bool
}

// Defaults for Options' zero values.
const (
	DefaultCacheBytes    = 64 << 20
	DefaultDirCacheBytes = 16 << 20
	DefaultMaxRequest    = 8 << 20
	DefaultDirtyExpire   = 5 * time.Second
)

// Volume is an open FAT file system. All methods are safe for concurrent use.
type Volume struct {
	// mu is held for writing by every operation but file reads, which hold it for reading, so
	// that reads of open files go to the device side by side (see ReadAt).
	mu sync.RWMutex
	// io orders device writes: a batch of file data written without mu holds it from detach to
	// complete, and every other write and flush takes it (through dev), so nothing written later
	// can land before data of an earlier batch.
	io    sync.Mutex
	dev   blockdev.Device
	fence *fencedDevice // under dev and the cache: stops writing at the first device failure
	name  string        // for messages: the device's path when known
	geo   ondisk.Geometry
	boot  *ondisk.BootSector
	opts  Options
	loc   *time.Location
	fat   *table
	root  *node

	blockSize     int // I/O block size: the cache's page size
	cache         *pageCache
	flusher       chan struct{} // wakes the background writer
	stop          chan struct{} // closed at Close
	done          chan struct{} // closed when the background writer is gone
	dirtySince    time.Time     // when something first became dirty after the last writeback
	fsinfo        ondisk.FSInfo // as last written
	fsinfoRaw     []byte        // the FSINFO sector, once read
	bootState     uint8         // state byte as on disk
	openedDirty   bool          // the dirty bit was set before this open
	dirtyDirs     map[*dirContent]struct{}
	orphans       map[*node]struct{} // removed while open: their clusters go at the last close
	order         order              // FAT changes waiting for something else to be durable
	unflushed     bool               // something was written since the last flush
	closing       bool
	closed        bool
	labelFromBoot bool
	damage        error               // first damage found (see damage.go); changes are refused
	claims        map[uint32]claimant // cluster -> entry whose chain holds it (see claim)
	dirs          dirCache            // the directories in memory, least recently used last
}

// Geometry returns the volume's layout.
func (v *Volume) Geometry() ondisk.Geometry { return v.geo }

// Options returns the options the volume was opened with, defaults filled in.
func (v *Volume) Options() Options { return v.opts }

// BlockSize is the I/O block size in use: the device layer's choice or Options.BlockSize.
func (v *Volume) BlockSize() int { return v.blockSize }

// Device returns the device the volume lives on.
func (v *Volume) Device() blockdev.Device { return v.fence.Device }

// Err returns the device failure that stopped the volume taking writes, or nil while it
// takes them. Once set it stays until the volume is opened again; it wraps syscall.EIO.
func (v *Volume) Err() error { return v.fence.err() }

// OpenImage opens the image file or block device at path.
func OpenImage(path string, opts Options) (*Volume, error) {
	dev, err := blockdev.Open(path, opts.ReadOnly)
	if err != nil {
		return nil, err
	}
	v, err := Open(dev, opts)
	if err != nil {
		dev.Close()
		return nil, err
	}
	v.name = path
	return v, nil
}

// Open reads and validates the boot sector and the FAT, and, unless read-only, marks the volume
// dirty until Close. The caller keeps ownership of dev only if Open fails.
func Open(dev blockdev.Device, opts Options) (*Volume, error) {
	v := &Volume{opts: opts, loc: opts.Location, name: "volume", dirtyDirs: map[*dirContent]struct{}{}, orphans: map[*node]struct{}{}, claims: map[uint32]claimant{}}
	v.fence = newFencedDevice(dev, !opts.ContinueAfterDeviceError)
	v.dev = &orderedDevice{Device: v.fence, mu: &v.io}
	if p, ok := dev.(interface{ Path() string }); ok {
		v.name = p.Path()
	}
	if v.loc == nil {
		v.loc = time.Local
	}
	if opts.Logger == nil {
		v.opts.Logger = slog.Default()
	}
	if v.opts.DirCacheBytes <= 0 {
		v.opts.DirCacheBytes = DefaultDirCacheBytes
	}
	if v.opts.CacheBytes <= 0 {
		v.opts.CacheBytes = DefaultCacheBytes
	}
	if v.opts.MaxRequest <= 0 {
		v.opts.MaxRequest = DefaultMaxRequest
	}
	if v.opts.DirtyExpire <= 0 {
		v.opts.DirtyExpire = DefaultDirtyExpire
	}
	sector := make([]byte, 4096)
	if _, err := dev.ReadAt(sector[:512], 0); err != nil {
		return nil, fmt.Errorf("%s: read boot sector: %w", v.name, err)
	}
	if !ondisk.HasSignature(sector) {
		return nil, fmt.Errorf("%s: %w: no boot sector signature", v.name, ondisk.ErrNotFAT)
	}
	boot, err := ondisk.ParseBootSector(sector)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.name, err)
	}
	geo, err := boot.Geometry(dev.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.name, err)
	}
	v.boot, v.geo, v.bootState = boot, geo, boot.State
	v.openedDirty = boot.State&ondisk.StateDirty != 0
	v.blockSize = dev.BlockSize()
	if bs := opts.BlockSize; bs != 0 {
		if bs&(bs-1) != 0 || bs < dev.LogicalBlockSize() || bs > 64<<10 {
			return nil, fmt.Errorf("%s: block size %d is not a power of two from the logical block size %d to 64 KiB", v.name, bs, dev.LogicalBlockSize())
		}
		v.blockSize = bs
	}
	v.opts.Logger.Info("fatvol: opened", "device", v.name, "type", geo.Type.String(),
		"clusterSize", geo.ClusterSize, "clusters", geo.Clusters, "blockSize", v.blockSize,
		"readOnly", opts.ReadOnly)

	if !opts.ReadOnly && v.openedDirty {
		// A crash may have cut a rename short, leaving the file under both names, or left the
		// long-name entries of a name crossing sectors without their short entry: complete
		// the one (keep the new name) and delete the others, as a journal replay would, before
		// anything is read.
		done, err := fsck.ResolveInterrupted(v.dev)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		for _, p := range done {
			v.opts.Logger.Info("fatvol: completed what a crash cut short", "device", v.name, "problem", p.String())
		}
	}

	raw := make([]byte, geo.FATBytes())
	fatCopy := max(geo.ActiveFAT, 0)
	if _, err := dev.ReadAt(raw, geo.FATOffset(fatCopy)); err != nil {
		return nil, fmt.Errorf("%s: read FAT: %w", v.name, err)
	}
	v.fat = newTable(&geo, raw)
	v.noteDamage(v.fat.damage())
	if geo.Type == ondisk.FAT32 && geo.FSInfoSector != 0 {
		buf := make([]byte, geo.SectorSize)
		if _, err := dev.ReadAt(buf, geo.FSInfoSector*int64(geo.SectorSize)); err != nil {
			return nil, fmt.Errorf("%s: read FSINFO: %w", v.name, err)
		}
		if fi, err := ondisk.ParseFSInfo(buf); err == nil {
			v.fsinfo = fi
			if v.fat.isData(fi.NextFree) {
				v.fat.next = fi.NextFree
			}
		} else {
			// A broken FSINFO is rewritten at the first writeback; it is only a hint.
			v.fsinfo = ondisk.FSInfo{FreeCount: ondisk.Unknown - 1}
		}
	}
	v.cache = newPageCache(v.fence, v.blockSize)
	v.root = v.newRootNode()
	if _, err := v.root.loadDir(); err != nil {
		return nil, fmt.Errorf("%s: root directory: %w", v.name, err)
	}
	if !opts.ReadOnly {
		if err := v.setState(v.bootState | ondisk.StateDirty); err != nil {
			return nil, err
		}
		v.flusher, v.stop, v.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go v.backgroundWriter()
	}
	return v, nil
}

// setState writes the boot sector's state byte (Linux's dirty bit) and makes it durable.
func (v *Volume) setState(state uint8) error {
	if state == v.bootState {
		return nil
	}
	// The backup boot sector gets the same byte: fsck.fat compares the two and would otherwise
	// report every volume in use as differing from its backup.
	b := []byte{state}
	sectors := []int64{0}
	if v.geo.BackupBootSector != 0 {
		sectors = append(sectors, v.geo.BackupBootSector)
	}
	for _, s := range sectors {
		if _, err := v.dev.WriteAt(b, s*int64(v.geo.SectorSize)+int64(v.boot.StateOffset())); err != nil {
			return fmt.Errorf("%s: write boot sector state: %w", v.name, err)
		}
	}
	if err := v.dev.Flush(); err != nil {
		return fmt.Errorf("%s: flush: %w", v.name, err)
	}
	v.bootState = state
	return nil
}

// Sync writes back everything and makes it durable.
func (v *Volume) Sync() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.usable(); err != nil {
		return err
	}
	return v.syncLocked()
}

func (v *Volume) syncLocked() error {
	if v.opts.ReadOnly {
		return nil
	}
	return v.durable()
}

// OpenedDirty tells whether the volume's dirty bit was set when it was opened: it was not
// cleanly unmounted (or is in use elsewhere), and some data may be corrupt.
func (v *Volume) OpenedDirty() bool { return v.openedDirty }

// Close writes everything back, clears the dirty bit (unless it was set at open and the volume
// was not Checked), and closes the device. Files still open are written back too; using them
// afterwards fails.
func (v *Volume) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed || v.closing {
		return nil
	}
	var err error
	if !v.opts.ReadOnly {
		// The background writer needs the lock to finish; let it go first.
		v.closing = true
		close(v.stop)
		v.mu.Unlock()
		<-v.done
		v.mu.Lock()
		err = v.trimOpenFiles(v.root)
		// Files removed while open lose their clusters now, as at their last close.
		for n := range v.orphans {
			if ferr := n.freeClusters(); err == nil {
				err = ferr
			}
		}
		if err == nil {
			err = v.syncLocked()
		}
		if err == nil && (!v.openedDirty || v.opts.Checked) {
			err = v.setState(v.bootState &^ ondisk.StateDirty)
		}
	}
	v.closed = true
	// The page buffers go back to the process's pool (they are not the collector's to reclaim);
	// dirty data still held is what a failed device could not take. io waits out a batch a
	// writer may still have in flight.
	v.io.Lock()
	v.cache.drop()
	v.io.Unlock()
	if cerr := v.dev.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("%s: close: %w", v.name, cerr)
	}
	return err
}

func (v *Volume) usable() error {
	if v.closed {
		return errClosed
	}
	return nil
}

func (v *Volume) writable() error {
	if v.closed {
		return errClosed
	}
	if v.opts.ReadOnly || v.damage != nil {
		return errReadOnly
	}
	return v.fence.err()
}

var errClosed = errors.New("volume is closed")

// ErrCorrupt is wrapped by every error that comes from what the disk holds rather than from the
// device or the request: a broken chain, a directory that loops. Errno maps it to EIO, as Linux.
var ErrCorrupt = errors.New("file system is corrupt")

// trimOpenFiles drops the preallocated clusters of files still open at Close, as their last
// close would have.
func (v *Volume) trimOpenFiles(n *node) error {
	if n.dir == nil {
		return nil
	}
	for _, c := range n.dir.children {
		var err error
		if c.isDir() {
			err = v.trimOpenFiles(c)
		} else if c.refs > 0 && !c.unlinked {
			err = c.trimPrealloc()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// orderedDevice makes every write and flush wait for a batch of file data in flight.
type orderedDevice struct {
	blockdev.Device
	mu *sync.Mutex
}

func (d *orderedDevice) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Device.WriteAt(p, off)
}

func (d *orderedDevice) WritevAt(bufs [][]byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Device.WritevAt(bufs, off)
}

func (d *orderedDevice) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Device.Flush()
}
