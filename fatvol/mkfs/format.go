package mkfs

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// zeroChunk is the read-only zero buffer repeated in the write vector for the long zero runs
// (reserved area, FATs, root directory): the data area is never written, so images stay sparse.
// Made at the first format: the binary's other commands, a mount among them, never need it, and
// as live heap it would raise their collector's goal.
var zeroChunk = sync.OnceValue(func() []byte { return make([]byte, 1<<20) })

// Format writes a fresh empty FAT file system over the whole device, with the geometry mkfs.fat
// 4.2 would choose, and returns its geometry. It zeroes the reserved area, every FAT copy and the
// root directory and writes the boot sector, FSINFO and their FAT32 backups, all in one vectored
// write from the start of the device, then flushes. The device's logical block size is the
// smallest sector size used, as in mkfs.fat.
func Format(dev blockdev.Device, opts Options) (ondisk.Geometry, error) {
	size := dev.Size()
	if lbs := dev.LogicalBlockSize(); lbs > hardSectorSize && opts.SectorSize < lbs {
		opts.SectorSize = lbs
	}
	l, err := plan(size, opts, time.Now())
	if err != nil {
		return ondisk.Geometry{}, fmt.Errorf("mkfs: %w", err)
	}
	g, err := l.bs.Geometry(size)
	if err != nil {
		return g, fmt.Errorf("mkfs: planned boot sector does not validate: %w", err)
	}
	if g.Type != l.fatType || g.Clusters != l.clusters {
		return g, fmt.Errorf("mkfs: planned %s with %d clusters reads back as %s with %d", l.fatType, l.clusters, g.Type, g.Clusters)
	}
	var diskSignature uint32
	if l.mbr {
		diskSignature = existingDiskSignature(dev, l.bs.VolumeID)
	}
	bufs := l.metadata(&g, diskSignature)
	n, err := dev.WritevAt(bufs, 0)
	if err != nil {
		return g, fmt.Errorf("mkfs: writing metadata: %w", err)
	}
	if want := g.FirstDataSector*int64(g.SectorSize) + l.rootClusterBytes(&g); int64(n) != want {
		return g, fmt.Errorf("mkfs: wrote %d bytes of metadata, want %d", n, want)
	}
	if err := dev.Flush(); err != nil {
		return g, fmt.Errorf("mkfs: %w", err)
	}
	return g, nil
}

// existingDiskSignature keeps the MBR disk signature already on the device, like mkfs.fat, and
// falls back to the volume ID.
func existingDiskSignature(dev blockdev.Device, fallback uint32) uint32 {
	p := make([]byte, 512)
	if _, err := dev.ReadAt(p, 0); err == nil && ondisk.HasSignature(p) {
		if sig := binary.LittleEndian.Uint32(p[mbrDiskSignatureOffset:]); sig != 0 {
			return sig
		}
	}
	return fallback
}

// rootClusterBytes is the FAT32 root directory cluster, written zeroed after the FATs.
func (l *layout) rootClusterBytes(g *ondisk.Geometry) int64 {
	if l.fatType == ondisk.FAT32 {
		return int64(g.ClusterSize)
	}
	return 0
}

// metadata lays out everything from sector 0 to the end of the root directory as a write vector.
func (l *layout) metadata(g *ondisk.Geometry, diskSignature uint32) [][]byte {
	ss := int64(g.SectorSize)
	var bufs [][]byte
	zeros := func(n int64) {
		zero := zeroChunk()
		for n > 0 {
			c := min(n, int64(len(zero)))
			bufs = append(bufs, zero[:c])
			n -= c
		}
	}

	// Reserved area: the boot sector and, on FAT32, FSINFO and the backups; zero elsewhere.
	boot := make([]byte, ss)
	l.bs.Marshal(boot)
	writeBootCode(boot, int(l.bs.Jump[1])+2)
	if l.mbr {
		writeMBR(boot, l.bs, l.fatType, diskSignature)
	}
	used := int64(1)
	if l.fatType == ondisk.FAT32 {
		used = max(used, g.FSInfoSector+1, g.BackupBootSector+1, int64(l.backupInfo)+1)
	}
	reserved := make([]byte, used*ss)
	copy(reserved, boot)
	if l.fatType == ondisk.FAT32 {
		info := ondisk.FSInfo{FreeCount: l.clusters - 1, NextFree: fat32RootCluster}
		info.Marshal(reserved[g.FSInfoSector*ss:])
		if g.BackupBootSector != 0 {
			copy(reserved[g.BackupBootSector*ss:], boot)
		}
		if l.backupInfo != 0 {
			info.Marshal(reserved[int64(l.backupInfo)*ss:])
		}
	}
	bufs = append(bufs, reserved)
	zeros((g.ReservedSectors - used) * ss)

	// FATs: the reserved entries (and the FAT32 root cluster's end of chain) in the first sector.
	first := make([]byte, ss)
	setFATEntry(first, l.fatType, 0, 0x0fffffff)
	setFATEntry(first, l.fatType, 1, 0x0fffffff)
	first[0] = l.bs.Media
	if l.fatType == ondisk.FAT32 {
		setFATEntry(first, l.fatType, fat32RootCluster, 0x0ffffff8)
	}
	for range g.NumFATs {
		bufs = append(bufs, first)
		zeros((g.FATSectors - 1) * ss)
	}

	// Root directory: the fixed area on FAT12/16, cluster 2 on FAT32; the label entry first.
	rootBytes := g.RootDirSectors*ss + l.rootClusterBytes(g)
	if l.labelEntry {
		root := make([]byte, ss)
		l.labelDirEntry().Encode(root)
		bufs = append(bufs, root)
		rootBytes -= ss
	}
	zeros(rootBytes)
	return bufs
}

// setFATEntry stores value in FAT entry n of a FAT sector, as mkfs.fat's mark_FAT_cluster.
func setFATEntry(fat []byte, t ondisk.FATType, n int, value uint32) {
	switch t {
	case ondisk.FAT12:
		value &= 0xfff
		i := 3 * n / 2
		if n%2 == 0 {
			fat[i] = byte(value)
			fat[i+1] = fat[i+1]&0xf0 | byte(value>>8)
		} else {
			fat[i] = fat[i]&0x0f | byte(value<<4)
			fat[i+1] = byte(value >> 4)
		}
	case ondisk.FAT16:
		binary.LittleEndian.PutUint16(fat[2*n:], uint16(value))
	default:
		binary.LittleEndian.PutUint32(fat[4*n:], value&0x0fffffff)
	}
}

// labelDirEntry is the root directory's volume label entry, stamped like mkfs.fat: creation,
// modification and access all at the creation time (in its location), 1980-01-01 outside FAT's
// date range.
func (l *layout) labelDirEntry() *ondisk.DirEntry {
	e := &ondisk.DirEntry{Name: ondisk.ShortName(l.label), Attr: ondisk.AttrVolumeID}
	if e.Name[0] == 0xe5 {
		e.Name[0] = 0x05
	}
	t := l.createTime
	date, tm := uint16(1<<5|1), uint16(0)
	if y := t.Year(); y >= 1980 && y <= 2107 {
		date = uint16(y-1980)<<9 | uint16(t.Month())<<5 | uint16(t.Day())
		tm = uint16(t.Hour())<<11 | uint16(t.Minute())<<5 | uint16(t.Second()/2)
	}
	e.CreateTime, e.CreateDate, e.AccessDate = tm, date, date
	e.ModTime, e.ModDate = tm, date
	return e
}
