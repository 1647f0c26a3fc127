package layout

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Alignment of the one partition an MBR layout gets: 1 MiB, where fdisk, sfdisk, parted and
// Windows start the first partition, a multiple of every flash erase block size that matters.
const partitionAlign = 1 << 20

// MBR CHS geometry of the table: 255 heads, 63 sectors a track, as fdisk and Windows use for
// anything larger than a floppy; addresses past cylinder 1023 are written as (1023, 254, 63).
const (
	chsHeads   = 255
	chsSectors = 63
)

// ParseKind reads a layout name as the tools and StorageClasses spell it: "superfloppy" (the
// file system on the whole medium, as Windows formats removable drives) or "mbr" (an MBR with one
// FAT partition from 1 MiB, as SD cards and most sticks ship).
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "", "superfloppy":
		return Superfloppy, nil
	case "mbr", "dos":
		return MBR, nil
	}
	return Unknown, fmt.Errorf("layout %q: want superfloppy or mbr", s)
}

// partitionSpan is where Format puts the one partition of an MBR layout on a medium of size
// bytes: from 1 MiB to the end (whole sectors, at most the 2^32-1 sectors an entry can count).
func partitionSpan(size int64, sectorSize int) (start, sectors int64, err error) {
	ss := int64(sectorSize)
	start = max(partitionAlign/ss, 1)
	sectors = min(size/ss-start, 0xFFFFFFFF)
	if sectors <= 0 {
		return 0, 0, fmt.Errorf("layout: a %d-byte medium has no room for a partition after the first MiB", size)
	}
	return start, sectors, nil
}

// Plan checks, without writing, that Format would succeed on a medium of size bytes with
// sectorSize-byte sectors (the size a new image file is created with).
func Plan(size int64, sectorSize int, kind Kind, opts mkfs.Options) error {
	switch kind {
	case Superfloppy:
		_, err := mkfs.Plan(size, opts)
		return err
	case MBR:
		start, sectors, err := partitionSpan(size, sectorSize)
		if err != nil {
			return err
		}
		opts.HiddenSectors = uint32(start)
		_, err = mkfs.Plan(sectors*int64(sectorSize), opts)
		return err
	}
	return fmt.Errorf("layout: cannot format a %s layout", kind)
}

// Format writes a fresh FAT file system on dev in the given layout and returns its geometry and
// the partition it is in (number 0, the whole medium, for a superfloppy). MBR: the file system
// goes into one partition from 1 MiB to the end (its hidden sectors are the partition's start),
// then sector 0 gets a table with that partition alone, of the type its FAT type and size call
// for (mbrType), and every sector before the partition is zeroed, so no earlier table or boot
// sector is left to be found there.
func Format(dev blockdev.Device, kind Kind, opts mkfs.Options) (ondisk.Geometry, Partition, error) {
	switch kind {
	case Superfloppy:
		g, err := mkfs.Format(dev, opts)
		return g, Partition{Number: 0, Size: dev.Size()}, err
	case MBR:
	default:
		return ondisk.Geometry{}, Partition{}, fmt.Errorf("layout: cannot format a %s layout", kind)
	}
	ss := dev.LogicalBlockSize()
	start, sectors, err := partitionSpan(dev.Size(), ss)
	if err != nil {
		return ondisk.Geometry{}, Partition{}, err
	}
	p := Partition{Number: 1, Start: start * int64(ss), Size: sectors * int64(ss)}
	if err := Plan(dev.Size(), ss, MBR, opts); err != nil {
		return ondisk.Geometry{}, p, err
	}
	w, err := blockdev.NewWindow(dev, p.Start, p.Size)
	if err != nil {
		return ondisk.Geometry{}, p, err
	}
	opts.HiddenSectors, opts.MBR = uint32(start), false
	g, err := mkfs.Format(w, opts)
	if err != nil {
		return g, p, err
	}
	p.MBRType = mbrType(g.Type, start, sectors)
	head := make([]byte, p.Start)
	writeMBRSector(head[:ss], p.MBRType, start, sectors, diskSignature(dev, ss, p.Start))
	if _, err := dev.WriteAt(head, 0); err != nil {
		return g, p, fmt.Errorf("layout: writing the partition table: %w", err)
	}
	if err := dev.Flush(); err != nil {
		return g, p, fmt.Errorf("layout: %w", err)
	}
	return g, p, nil
}

// mbrType is the partition type for a FAT file system of type t in sectors [start,
// start+sectors), by the rules of mkfs.fat's --mbr and the SD card file system specification:
// FAT12 0x01 and FAT16 0x04 below 65,536 sectors (32 MiB), FAT12/16 0x06 above while the
// partition ends inside what CHS can address (8,032.5 MiB at 255 heads and 63 sectors), 0x0E
// (FAT16 LBA) past that, and FAT32 0x0C (LBA). FAT16 is at most 4 GiB, so from a 1 MiB start it
// always gets 0x06, which Windows writes for it too; 0x0E would only tell old BIOSes to use LBA,
// which every system reading a FAT16 partition today does anyway.
func mbrType(t ondisk.FATType, start, sectors int64) byte {
	switch {
	case t == ondisk.FAT32:
		return 0x0C
	case t == ondisk.FAT12 && sectors < 65536:
		return 0x01
	case t == ondisk.FAT16 && sectors < 65536:
		return 0x04
	case start+sectors <= chsHeads*chsSectors*1024:
		return 0x06
	}
	return 0x0E
}

// diskSignature keeps the disk signature of a table already on dev, as fdisk and mkfs.fat do,
// else takes the new file system's volume ID from its boot sector at bootOffset (mkfs.fat's
// fallback).
func diskSignature(dev blockdev.Device, ss int, bootOffset int64) uint32 {
	s := make([]byte, ss)
	if _, err := dev.ReadAt(s, 0); err == nil && ondisk.HasSignature(s) && !IsFATBootSector(s) {
		if sig := binary.LittleEndian.Uint32(s[440:]); sig != 0 {
			return sig
		}
	}
	if _, err := dev.ReadAt(s, bootOffset); err == nil {
		if bs, err := ondisk.ParseBootSector(s); err == nil {
			return bs.VolumeID
		}
	}
	return 0
}

// writeMBRSector lays out sector 0 of an MBR layout: no boot code, the disk signature, one
// partition entry, 0x55AA.
func writeMBRSector(s []byte, typ byte, start, sectors int64, diskSignature uint32) {
	binary.LittleEndian.PutUint32(s[440:], diskSignature)
	e := s[mbrTableOffset:]
	e[0] = 0x00 // not active: a data medium, nothing to boot
	copy(e[1:4], chs(start))
	e[4] = typ
	copy(e[5:8], chs(start+sectors-1))
	binary.LittleEndian.PutUint32(e[8:], uint32(start))
	binary.LittleEndian.PutUint32(e[12:], uint32(sectors))
	s[510], s[511] = 0x55, 0xAA
}

// chs encodes an LBA as an MBR CHS triple (head, sector | cylinder high bits, cylinder low).
func chs(lba int64) []byte {
	c := lba / (chsHeads * chsSectors)
	if c > 1023 {
		return []byte{254, 0xFF, 0xFF}
	}
	h := (lba / chsSectors) % chsHeads
	sec := lba%chsSectors + 1
	return []byte{byte(h), byte(sec) | byte(c>>8)<<6, byte(c)}
}
