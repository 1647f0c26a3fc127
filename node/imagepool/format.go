package imagepool

import (
	"fmt"
	"os"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Growth room. A FAT volume grows in place only as far as its FATs have entries (they cannot
// move under a mounted volume) and its type allows (docs/engine.md). With maxSize the image is
// formatted for it (mkfs.Options.MaxSize). Without, it gets mkfs.fat's layout for its size with
// FATs for a default room: up to DefaultGrowth times the size, as far as the type allows at that
// cluster size, and at most defaultRoomFATBytes more FAT per copy (memory too: the engine holds
// the FAT). So allowVolumeExpansion works for ordinary growth at the cost of a few MiB at most.
const (
	DefaultGrowth       = 8
	defaultRoomFATBytes = 4 << 20
)

// MkfsOptions are the formatter's options for an image of size bytes with params.
func MkfsOptions(size int64, params volume.Params) (mkfs.Options, error) {
	opts, err := params.MkfsOptions(512)
	if err != nil {
		return opts, err
	}
	if params.MaxSize != 0 {
		if params.MaxSize < size {
			return opts, fmt.Errorf("%w: %s %d bytes is below the volume's %d bytes", mkfs.ErrNoFit, volume.ParamMaxSize, params.MaxSize, size)
		}
		opts.MaxSize = params.MaxSize
		return opts, nil
	}
	bs, err := mkfs.Plan(size, opts)
	if err != nil {
		return opts, err
	}
	g, err := bs.Geometry(size)
	if err != nil {
		return opts, err
	}
	room := opts
	room.FATType, room.SectorsPerCluster = g.Type, g.SectorsPerCluster
	clusters := min(int64(ondisk.MaxClusters(g.Type)), int64(g.Clusters)+defaultRoomFATBytes*8/int64(g.Type))
	room.MaxSize = min(DefaultGrowth*size, (g.FirstDataSector*int64(g.SectorSize))+clusters*int64(g.ClusterSize), volume.MaxImageSize)
	// The longer FATs move the data area, so at the type's limit the first guess may be a little
	// too large for the type: step down a few times, else mkfs.fat's layout without room.
	step := max(16*int64(g.ClusterSize), 64<<10)
	for try := 0; try < 8 && room.MaxSize > size; try++ {
		if _, err := mkfs.Plan(size, room); err == nil {
			return room, nil
		}
		room.MaxSize -= step
	}
	return opts, nil
}

// GrowLimit is how large an image of size bytes formatted with params can grow.
func GrowLimit(size int64, params volume.Params) (int64, error) {
	opts, err := MkfsOptions(size, params)
	if err != nil {
		return 0, err
	}
	bs, err := mkfs.Plan(size, opts)
	if err != nil {
		return 0, err
	}
	g, err := bs.Geometry(size)
	if err != nil {
		return 0, err
	}
	return g.MaxGrowSectors() * int64(g.SectorSize), nil
}

// Format formats an image of size bytes for params, with its growth room, and closes it.
func Format(dev *blockdev.File, size int64, params volume.Params) error {
	opts, err := MkfsOptions(size, params)
	if err == nil {
		_, err = mkfs.Format(dev, opts)
	}
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// AlignedSize rounds required up to a whole MiB, else 4 KiB, else a sector, within limit.
func AlignedSize(required, limit int64) (int64, bool) {
	for _, align := range []int64{1 << 20, 4096, 512} {
		if up := (required + align - 1) / align * align; limit == 0 || up <= limit {
			return up, true
		}
	}
	return 0, false
}

// GrowFile makes the image at path size bytes long (never shorter), durably: a sparse
// extension whose new size survives a crash before the file system counts on it.
func GrowFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("grow image: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("grow image %s: %w", path, err)
	}
	if st.Size() >= size {
		return nil
	}
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("grow image %s to %d bytes: %w", path, size, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("grow image %s: %w", path, err)
	}
	return nil
}
