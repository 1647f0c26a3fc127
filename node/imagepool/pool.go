package imagepool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Image files' names in the pool.
const (
	ImageSuffix = ".img"
	// CreatingSuffix marks an image being made; a leading dot keeps it apart from every volume
	// name, which cannot start with one.
	CreatingSuffix = ".creating"
)

// Pool keeps volumes as sparse image files in one directory on a node-local disk.
type Pool struct {
	Dir     string
	Reserve int64 // bytes of the pool's file system never promised to volumes
}

func (p *Pool) Path(name string) string { return filepath.Join(p.Dir, name+ImageSuffix) }

func (p *Pool) CreatingPath(name string) string {
	return filepath.Join(p.Dir, "."+name+ImageSuffix+CreatingSuffix)
}

// RemoveLeftovers deletes images a crash left half made.
func (p *Pool) RemoveLeftovers() error {
	left, err := filepath.Glob(filepath.Join(p.Dir, ".*"+ImageSuffix+CreatingSuffix))
	if err != nil {
		return err
	}
	for _, f := range left {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("image pool: remove half-made image: %w", err)
		}
	}
	return nil
}

// ChooseSize picks an image size in [required, limit] (limit 0: none), rounded up to a
// whole MiB where the limit allows, else to 4 KiB or a sector, so the device layer can use large
// blocks. A size too small for the file system asked for grows to the next that fits, within the
// limit; what cannot fit is OutOfRange.
func ChooseSize(required, limit int64, params volume.Params) (int64, error) {
	size := required
	if size == 0 {
		size = volume.DefaultImageSize
		if limit != 0 && limit < size {
			size = limit
		}
	}
	aligned := false
	for _, align := range []int64{1 << 20, 4096, 512} {
		if up := (size + align - 1) / align * align; limit == 0 || up <= limit {
			size, aligned = up, true
			break
		}
	}
	if !aligned {
		return 0, status.Errorf(codes.OutOfRange, "no whole number of 512-byte sectors lies between %d and %d bytes", required, limit)
	}
	opts, err := params.MkfsOptions(512)
	if err != nil {
		return 0, status.Error(codes.InvalidArgument, err.Error())
	}
	first := size
	for size <= volume.MaxImageSize && (limit == 0 || size <= limit) {
		_, err = mkfs.Plan(size, opts)
		if err == nil {
			return size, nil
		}
		if !errors.Is(err, mkfs.ErrNoFit) {
			return 0, status.Errorf(codes.InvalidArgument, "file system parameters: %v", err)
		}
		if required != 0 && size >= 2*required+64<<20 {
			break // growing helps only a volume that is too small
		}
		size = (size*2 + 1<<20 - 1) / (1 << 20) * (1 << 20)
	}
	return 0, status.Errorf(codes.OutOfRange, "no FAT file system with these parameters fits %d bytes (limit %d): %v", first, limit, err)
}

// Create makes a sparse image of size bytes and formats it. The image appears under its
// final name only once formatted, so a crash never leaves a volume without a file system.
func (p *Pool) Create(name string, size int64, params volume.Params) error {
	tmp := p.CreatingPath(name)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("image pool: %w", err)
	}
	dev, err := blockdev.CreateImage(tmp, size)
	if err != nil {
		return err
	}
	err = Format(dev, size, params)
	if err == nil {
		err = os.Rename(tmp, p.Path(name))
	}
	if err == nil {
		err = volume.SyncDir(p.Dir)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image pool: create %s: %w", p.Path(name), err)
	}
	return nil
}

// Remove deletes a volume's image; a missing image is already deleted.
func (p *Pool) Remove(name string) error {
	if err := os.Remove(p.Path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("image pool: %w", err)
	}
	return volume.SyncDir(p.Dir)
}

// Unwritten is how many bytes of an image are promised but not yet allocated on disk: what
// filling it would still take from the pool's file system.
func (p *Pool) Unwritten(name string, size int64) int64 {
	var st unix.Stat_t
	if err := unix.Stat(p.Path(name), &st); err != nil {
		return size
	}
	return max(size-st.Blocks*512, 0)
}

// Free is the space the pool's file system has for unprivileged writers.
func (p *Pool) Free() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p.Dir, &st); err != nil {
		return 0, fmt.Errorf("image pool: statfs %s: %w", p.Dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// Largest is the largest whole-MiB image up to upTo that the parameters can format: FAT12
// and FAT16 (and a forced cluster size) stop well below what a disk may have free, and
// GetCapacity should not promise what CreateVolume would answer with OutOfRange. 0 when none fits.
func Largest(upTo int64, params volume.Params) int64 {
	opts, err := params.MkfsOptions(512)
	if err != nil {
		return 0
	}
	fits := func(size int64) bool {
		_, err := mkfs.Plan(size, opts)
		return err == nil
	}
	upTo = upTo / (1 << 20) * (1 << 20)
	if upTo <= 0 {
		return 0
	}
	if fits(upTo) {
		return upTo
	}
	smallest, err := ChooseSize(1<<20, upTo, params)
	if err != nil {
		return 0
	}
	// Sizes that fit form a range: search its upper end between smallest and upTo.
	lo, hi := smallest/(1<<20), upTo/(1<<20) // lo fits, hi does not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if fits(mid << 20) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo << 20
}
