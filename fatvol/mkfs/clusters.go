package mkfs

import "github.com/csi-fat/csi-fat/fatvol/ondisk"

// Cluster-count limits mkfs.fat formats to. 4085 and 4086 clusters are skipped on purpose:
// Windows' fastfat still calls such a volume FAT12, Linux calls it FAT16.
const (
	maxClusters12 = 4084
	minClusters16 = 4087
	maxClusters16 = 65524
	minClusters32 = 65525
	maxClusters32 = 268435446
)

// fatFit is one FAT type's result for one cluster size: how many clusters the volume gets and
// how long each FAT is, or why it does not fit.
type fatFit struct {
	clusters   uint32 // 0 when the type does not fit
	fatSectors uint32
	tooMany    bool // the type does not fit because there would be too many clusters
}

// clusterSearch is the input of mkfs.fat's cluster-size loop.
type clusterSearch struct {
	numSectors     uint32
	sectorSize     uint32
	reserved       uint32
	rootDirSectors uint32
	numFATs        uint32
	align          bool
	fatType        ondisk.FATType // 0 = FAT12 or FAT16, whichever gives more clusters
	fat32Forced    bool           // the user asked for FAT32: fewer than 65525 clusters are allowed
}

// searchResult is the outcome of the cluster-size loop: the chosen type and cluster size, and the
// per-type fits of the last cluster size tried.
type searchResult struct {
	fatType             ondisk.FATType
	clusterSize         uint32
	fit12, fit16, fit32 fatFit
	chosen              fatFit
}

// alignTo rounds sectors up to a multiple of the power of two n when aligning.
func alignTo(sectors, n uint32, align bool) uint32 {
	if !align {
		return sectors
	}
	return (sectors + n - 1) &^ (n - 1)
}

// cdiv is mkfs.fat's ceil(a/b) on C ints; callers pass unsigned values converted the way C does.
func cdiv(a, b int32) int32 { return (a + b - 1) / b }

// search mirrors the do-while loop of mkfs.fat 4.2's setup_tables: starting at clusterSize, try
// each cluster size up to maxClusterSize, doubling, until the wanted type fits. The arithmetic
// is mkfs.fat's own, in 32-bit unsigned integers, so the results match it exactly, including
// the FAT sizes that come out one sector longer than strictly necessary.
func (s clusterSearch) search(clusterSize, maxClusterSize int) searchResult {
	var r searchResult
	cs := uint8(clusterSize) // a byte in the boot sector: doubling 128 ends the loop at 0
	for {
		c := uint32(cs)
		ss := s.sectorSize
		nf := s.numFATs
		fatdata32 := s.numSectors - alignTo(s.reserved, c, s.align)
		fatdata1216 := fatdata32 - alignTo(s.rootDirSectors, c, s.align)

		// FAT12. The factor 2 avoids rounding errors with one FAT; nf*3 is for the two reserved
		// entries. The count is recomputed from the FAT length, since the slack of the FATs
		// could otherwise count as a cluster that is not there.
		var f12 fatFit
		f12.clusters = uint32(2 * (int64(fatdata1216)*int64(ss) + int64(nf*3)) / int64(2*c*ss+nf*3))
		f12.fatSectors = uint32(cdiv(int32(((f12.clusters+2)*3+1)>>1), int32(ss)))
		f12.fatSectors = alignTo(f12.fatSectors, c, s.align)
		f12.clusters = (fatdata1216 - nf*f12.fatSectors) / c
		max12 := min(f12.fatSectors*2*ss/3, maxClusters12)
		if f12.clusters > max12 {
			f12 = fatFit{tooMany: true}
		}

		var f16 fatFit
		f16.clusters = uint32((int64(fatdata1216)*int64(ss) + int64(nf*4)) / int64(c*ss+nf*2))
		f16.fatSectors = uint32(cdiv(int32((f16.clusters+2)*2), int32(ss)))
		f16.fatSectors = alignTo(f16.fatSectors, c, s.align)
		f16.clusters = (fatdata1216 - nf*f16.fatSectors) / c
		max16 := min(f16.fatSectors*ss/2, maxClusters16)
		if f16.clusters > max16 {
			f16 = fatFit{tooMany: true}
		}
		if f16.clusters != 0 && f16.clusters < minClusters16 {
			f16 = fatFit{} // would be taken for FAT12
		}

		var f32 fatFit
		f32.clusters = uint32((int64(fatdata32)*int64(ss) + int64(nf*8)) / int64(c*ss+nf*4))
		f32.fatSectors = uint32(cdiv(int32((f32.clusters+2)*4), int32(ss)))
		f32.fatSectors = alignTo(f32.fatSectors, c, s.align)
		f32.clusters = (fatdata32 - nf*f32.fatSectors) / c
		max32 := min(f32.fatSectors*ss/4, maxClusters32)
		if f32.clusters > max32 {
			f32 = fatFit{tooMany: true}
		}
		if f32.clusters != 0 && f32.clusters < minClusters32 && !s.fat32Forced {
			f32 = fatFit{}
		}

		r.fit12, r.fit16, r.fit32, r.clusterSize = f12, f16, f32, c
		auto := s.fatType == 0
		if (f12.clusters != 0 && (auto || s.fatType == ondisk.FAT12)) ||
			(f16.clusters != 0 && (auto || s.fatType == ondisk.FAT16)) ||
			(f32.clusters != 0 && s.fatType == ondisk.FAT32) {
			break
		}
		cs <<= 1
		if cs == 0 || int(cs) > maxClusterSize {
			break
		}
	}
	r.fatType = s.fatType
	if r.fatType == 0 {
		r.fatType = ondisk.FAT12
		if r.fit16.clusters > r.fit12.clusters {
			r.fatType = ondisk.FAT16
		}
	}
	switch r.fatType {
	case ondisk.FAT12:
		r.chosen = r.fit12
	case ondisk.FAT16:
		r.chosen = r.fit16
	default:
		r.chosen = r.fit32
	}
	return r
}
