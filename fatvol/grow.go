package fatvol

import (
	"errors"
	"fmt"
	"math"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// ErrGrowLimit is wrapped by Grow's refusal of a size past what the volume's FATs cover or its
// FAT type allows (ondisk.Geometry.MaxGrowSectors). Nothing is written then.
var ErrGrowLimit = errors.New("the file system cannot grow that far")

// bootTotalsOffset and bootTotalsEnd bound the bytes of the boot sector one growth rewrites: from
// the 16-bit total sectors to the end of the 32-bit one. One write of them lies in one sector, so
// a cut leaves the old totals or the new ones.
const (
	bootTotalsOffset = 19
	bootTotalsEnd    = 36
)

// Grow makes the file system as large as its device is now, while it is in use: the caller has
// grown the image (and blockdev.File.UpdateSize has read its new size). The FATs must already
// have entries for the new clusters (room left at format time, see mkfs.Options.MaxSize), since
// they cannot move under a mounted volume; a size past them or past the FAT type's cluster limit
// is refused with ErrGrowLimit before anything is written. It returns the file system's size in
// bytes: every whole sector of the device (not whole tracks, as mkfs.fat formats: Linux, mtools
// and fsck.fat need none). A device no larger than the file system changes nothing.
//
// Order: the new clusters' FAT entries must read free on disk before the boot sector counts them
// (they do on a volume mkfs formatted; other entries are made free and durable first, with a full
// writeback); then the boot sector's totals, the backup boot sector's, and a flush; only then do
// the clusters become free in memory, so nothing is allocated in them before the new size is
// durable. A cut leaves the old size or the new one (the backup may lag: fsck.fat mentions that,
// as for the dirty bit); FSINFO's free count, a hint, follows with the next writeback.
func (v *Volume) Grow() (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.usable(); err != nil {
		return 0, err
	}
	g := v.geo
	ss := int64(g.SectorSize)
	total := min(v.fence.Device.Size()/ss, math.MaxUint32)
	if total <= g.TotalSectors {
		return g.TotalSectors * ss, nil // nothing to do, read-only or not
	}
	if err := v.writable(); err != nil {
		return 0, err
	}
	if limit := g.MaxGrowSectors(); total > limit {
		return 0, fmt.Errorf("%s: grow to %d bytes: %w: its %s FATs of %d bytes each cover at most %d bytes (%d clusters of %d bytes; %s allows %d)",
			v.name, total*ss, ErrGrowLimit, g.Type, g.FATBytes(), limit*ss, (limit-g.FirstDataSector)/int64(g.SectorsPerCluster),
			g.ClusterSize, g.Type, ondisk.MaxClusters(g.Type))
	}
	clusters := uint32((total - g.FirstDataSector) / int64(g.SectorsPerCluster))
	if v.fat.clearRoom(g.MaxCluster()+1, clusters+1) {
		if err := v.durable(); err != nil {
			return 0, err
		}
	}

	boot := *v.boot
	boot.TotalSectors16, boot.TotalSectors32 = 0, 0
	if total >= 1<<16 || boot.IsFAT32Layout() {
		boot.TotalSectors32 = uint32(total)
	} else {
		boot.TotalSectors16 = uint16(total)
	}
	sector := make([]byte, max(ss, 512))
	boot.Marshal(sector)
	totals := sector[bootTotalsOffset:bootTotalsEnd]
	bootSectors := []int64{0}
	if g.BackupBootSector != 0 {
		bootSectors = append(bootSectors, g.BackupBootSector)
	}
	for _, s := range bootSectors {
		v.unflushed = true
		if _, err := v.dev.WriteAt(totals, s*ss+bootTotalsOffset); err != nil {
			return 0, fmt.Errorf("%s: grow: write boot sector %d: %w", v.name, s, err)
		}
	}
	if err := v.flushDevice(); err != nil {
		return 0, err
	}

	v.boot = &boot
	v.geo.TotalSectors, v.geo.Clusters = total, clusters
	v.fat.grow(clusters + 1)
	if err := v.writeFSInfo(); err != nil {
		return 0, err
	}
	v.opts.Logger.Info("fatvol: grew", "device", v.name, "bytes", total*ss, "clusters", clusters, "from", g.Clusters)
	return total * ss, nil
}

// clearRoom makes the entries of clusters from..to (past the data area: nothing uses them) free
// in memory where they are not, marking their sectors dirty. It tells whether any was not.
func (t *table) clearRoom(from, to uint32) bool {
	changed := false
	for c := from; c <= to; c++ {
		if t.get(c) != entFree {
			t.put(c, entFree)
			t.markEntryDirty(c)
			changed = true
		}
	}
	return changed
}

// grow makes clusters up to maxCluster part of the data area; their entries are free.
func (t *table) grow(maxCluster uint32) {
	t.free += maxCluster - t.maxCluster
	t.maxCluster = maxCluster
	words := int((int64(maxCluster) + 64) / 64)
	t.referenced = append(t.referenced, make([]uint64, words-len(t.referenced))...)
	t.fresh = append(t.fresh, make([]uint64, words-len(t.fresh))...)
}
