package mkfs

import (
	"encoding/binary"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Where mkfs.fat's --mbr puts the (fake) partition table: at the standard MBR offsets, inside the
// boot code area, so Windows accepts an unpartitioned disk.
const (
	mbrDiskSignatureOffset = 440
	mbrPartitionOffset     = 446
	mbrEnd                 = 510
)

// writeMBR puts a disk signature and one active partition spanning the whole volume into the
// boot sector p, like mkfs.fat 4.2's --mbr.
func writeMBR(p []byte, bs *ondisk.BootSector, fatType ondisk.FATType, diskSignature uint32) {
	p[mbrDiskSignatureOffset-1] = 0 // end the boot message before the table
	clear(p[mbrDiskSignatureOffset:mbrEnd])
	binary.LittleEndian.PutUint32(p[mbrDiskSignatureOffset:], diskSignature)

	sectors := bs.TotalSectors32
	if sectors == 0 {
		sectors = uint32(bs.TotalSectors16)
	}
	heads, spt := uint32(bs.NumHeads), uint32(bs.SectorsPerTrack)
	part := p[mbrPartitionOffset : mbrPartitionOffset+16]
	part[0] = 0x80                         // active
	part[1], part[2], part[3] = 0, 1, 0    // CHS of the first sector
	chsUnusable := heads > 254 || spt > 63 // the CHS fields cannot describe this geometry
	switch {
	case chsUnusable && fatType != ondisk.FAT32:
		part[4] = 0x0e // FAT16 (LBA)
	case chsUnusable:
		part[4] = 0x0c // FAT32 (LBA)
	case fatType == ondisk.FAT12 && sectors < 65536:
		part[4] = 0x01 // FAT12 (CHS)
	case fatType == ondisk.FAT16 && sectors < 65536:
		part[4] = 0x04 // FAT16 (CHS)
	case fatType != ondisk.FAT32 && sectors < spt*heads*1024:
		part[4] = 0x06 // big FAT16 or FAT12 (CHS)
	case fatType != ondisk.FAT32:
		part[4] = 0x0e
	default:
		part[4] = 0x0c
	}
	if chsUnusable || sectors >= spt*heads*1024 {
		part[5], part[6], part[7] = 254, 255, 255 // CHS of the last sector: (1023, 254, 63)
	} else {
		cyl := sectors / (heads * spt)
		part[5] = byte((sectors / spt) % heads)
		part[6] = byte(((1 + sectors%spt) & 63) | ((cyl >> 8) * 64))
		part[7] = byte(cyl)
	}
	binary.LittleEndian.PutUint32(part[8:], 0) // LBA of the first sector
	binary.LittleEndian.PutUint32(part[12:], sectors)
}
