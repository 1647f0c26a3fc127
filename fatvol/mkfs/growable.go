package mkfs

import (
	"fmt"
	"slices"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// A growable volume (Options.MaxSize) is formatted at its size with FATs long enough for
// MaxSize, so that it can grow in place while mounted: the FATs and the data area cannot move
// under a mounted volume, and neither can the FAT type, which readers tell by the cluster
// count. So the type and cluster size must suit both sizes: at the size, at least the type's
// minimum of clusters (FAT16 4087, FAT32 65525: mtools and Windows take a FAT32 layout with
// fewer for FAT16); at MaxSize, at most its maximum. The first layout that fits, in this order:
// the type mkfs.fat picks for MaxSize with the cluster size it picks there, then that type with
// smaller clusters, then FAT32, FAT16 and FAT12 likewise. The user's fatType and cluster size,
// when set, are the only ones tried.

// minClusters is the fewest clusters a volume of type t is formatted with.
func minClusters(t ondisk.FATType) uint32 {
	switch t {
	case ondisk.FAT16:
		return minClusters16
	case ondisk.FAT32:
		return minClusters32
	}
	return 1
}

// planGrowable plans a volume of size bytes whose FATs cover opts.MaxSize (> size).
func planGrowable(size int64, opts Options, now time.Time) (*layout, error) {
	// mkfs.fat ends a volume at a whole track (up to 63 sectors): the FATs are planned for a
	// little more, so that they cover every sector of MaxSize itself.
	ss := int64(opts.SectorSize)
	if ss == 0 {
		ss = hardSectorSize
	}
	maxSize := opts.MaxSize + 64*ss
	flat := opts
	flat.MaxSize = 0
	types := []ondisk.FATType{opts.FATType}
	if opts.FATType == 0 {
		types = nil
		if l, err := plan(maxSize, flat, now); err == nil {
			types = append(types, l.fatType)
		}
		for _, t := range []ondisk.FATType{ondisk.FAT32, ondisk.FAT16, ondisk.FAT12} {
			if !slices.Contains(types, t) {
				types = append(types, t)
			}
		}
	}
	var last error
	for _, t := range types {
		o := flat
		o.FATType = t
		spc := opts.SectorsPerCluster
		if spc == 0 {
			l, err := plan(maxSize, o, now)
			if err != nil {
				last = err
				continue
			}
			spc = int(l.bs.SectorsPerCluster)
		}
		for ; spc >= 1; spc /= 2 {
			o.SectorsPerCluster = spc
			big, err := plan(maxSize, o, now)
			if err == nil {
				var l *layout
				if l, err = big.shrunk(size, !opts.NoAlign); err == nil {
					return l, nil
				}
			}
			last = err
			if opts.SectorsPerCluster != 0 {
				break
			}
		}
	}
	return nil, fmt.Errorf("%w: no FAT layout of %d bytes can grow to %d bytes: the FAT type must suit both sizes, "+
		"and FAT12 stops at 4084 clusters, FAT16 keeps between 4087 and 65524 (so it grows at most 16-fold), FAT32 starts at 65525 "+
		"(about 33 MiB); ask for a smaller maximum or a larger size (last try: %v)", ErrNoFit, size, opts.MaxSize, last)
}

// shrunk is the layout l (planned for a larger size) on a volume of size bytes: the same
// reserved area, FATs and root directory, fewer sectors and clusters.
func (l *layout) shrunk(size int64, align bool) (*layout, error) {
	ss := int64(l.sectorSize)
	n := min(size/ss, maxTotalSectors)
	if spt := int64(l.bs.SectorsPerTrack); align && spt > 0 {
		n = n / spt * spt
	}
	bs := *l.bs
	bs.TotalSectors16, bs.TotalSectors32 = 0, 0
	if n >= 1<<16 {
		bs.TotalSectors32 = uint32(n)
	} else {
		bs.TotalSectors16 = uint16(n)
	}
	g, err := bs.Geometry(size)
	if err != nil {
		return nil, fmt.Errorf("%w: %d bytes with the FATs of %d clusters: %v", ErrNoFit, size, l.clusters, err)
	}
	if g.Type != l.fatType || g.Clusters < minClusters(l.fatType) {
		return nil, fmt.Errorf("%w: %d bytes gives %d clusters of %d bytes, fewer than %s needs (%d)",
			ErrNoFit, size, g.Clusters, g.ClusterSize, l.fatType, minClusters(l.fatType))
	}
	firstDataBlock := (g.FirstDataSector*ss/hardSectorSize + 1) / 2
	if size/mkfsBlockSize < firstDataBlock+minDataBlocks {
		return nil, fmt.Errorf("%w: %d bytes is too small: the %s metadata for growth alone takes %d KiB", ErrNoFit, size, l.fatType, firstDataBlock)
	}
	s := *l
	s.bs, s.clusters = &bs, g.Clusters
	return &s, nil
}
