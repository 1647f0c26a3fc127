package fuzzimage

import (
	"encoding/binary"
	"fmt"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// repackFAT32 shrinks a FAT32 image to its first clusters, shortening the FATs to match. mtools
// decides the FAT type by the cluster count, so it fills only FAT32 volumes of 65,525 clusters
// or more, whose FATs alone pass the seed size; repacking keeps the FAT32 layout with a short
// FAT. Everything the image holds must lie in the clusters kept.
func repackFAT32(img []byte, clusters uint32) ([]byte, error) {
	b, err := ondisk.ParseBootSector(img)
	if err != nil {
		return nil, err
	}
	g, err := b.Geometry(int64(len(img)))
	if err != nil {
		return nil, err
	}
	if g.Type != ondisk.FAT32 || clusters > g.Clusters {
		return nil, fmt.Errorf("repack: %s with %d clusters, want FAT32 with at least %d", g.Type, g.Clusters, clusters)
	}
	ss := int64(g.SectorSize)
	fatSectors := (int64(clusters+2)*4 + ss - 1) / ss
	first := g.ReservedSectors + int64(g.NumFATs)*fatSectors
	total := first + int64(clusters)*int64(g.SectorsPerCluster)
	out := make([]byte, total*ss)
	copy(out, img[:g.ReservedSectors*ss])
	le := binary.LittleEndian
	free := uint32(0)
	for n := 0; n < g.NumFATs; n++ {
		fat := out[(g.ReservedSectors+int64(n)*fatSectors)*ss:][:fatSectors*ss]
		copy(fat, img[g.FATOffset(n):][:fatSectors*ss])
		// The tail of the last FAT sector names clusters that no longer exist: they stay zero.
		clear(fat[(clusters+2)*4:])
		for c := uint32(2); c < clusters+2 && n == 0; c++ {
			v := le.Uint32(fat[c*4:]) & 0x0FFFFFFF
			if v == 0 {
				free++
			} else if v >= clusters+2 && v < 0x0FFFFFF7 {
				return nil, fmt.Errorf("repack: cluster %d points to %d, past the %d clusters kept", c, v, clusters)
			}
		}
	}
	copy(out[first*ss:], img[g.FirstDataSector*ss:][:int64(clusters)*int64(g.ClusterSize)])
	// The boot sector and its backup get the new sizes; FSINFO the new free count.
	boots := []int64{0}
	if g.BackupBootSector != 0 {
		boots = append(boots, g.BackupBootSector)
	}
	for _, s := range boots {
		le.PutUint32(out[s*ss+32:], uint32(total))
		le.PutUint32(out[s*ss+36:], uint32(fatSectors))
	}
	if g.FSInfoSector != 0 {
		fi := out[g.FSInfoSector*ss:]
		if info, err := ondisk.ParseFSInfo(fi); err == nil {
			info.FreeCount = free
			info.Marshal(fi)
		}
	}
	return out, nil
}

// RootDir returns up to n bytes of an image's root directory (the fixed root of FAT12/16, the
// root cluster of FAT32): where seed directory entries come from. nil when it has none.
func RootDir(img []byte, n int) []byte {
	b, err := ondisk.ParseBootSector(img)
	if err != nil {
		return nil
	}
	g, err := b.Geometry(0)
	if err != nil {
		return nil
	}
	off := g.RootDirSector * int64(g.SectorSize)
	if g.Type == ondisk.FAT32 {
		off = g.ClusterOffset(g.RootCluster)
	}
	if off >= int64(len(img)) {
		return nil
	}
	return img[off:min(int64(len(img)), off+int64(n))]
}
