// Package ondisk encodes and decodes FAT's on-disk structures: the boot sector, FSINFO, directory
// entries and long-name entries. It does no I/O, so the engine, mkfs and fsck share one reading of
// the format.
package ondisk

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// FATType is the width of a FAT entry in bits: 12, 16 or 32.
type FATType int

const (
	FAT12 FATType = 12
	FAT16 FATType = 16
	FAT32 FATType = 32
)

func (t FATType) String() string { return fmt.Sprintf("FAT%d", int(t)) }

// Cluster-count limits that decide the FAT type (Microsoft's fatgen103; Linux and dosfstools agree).
const (
	MaxClustersFAT12 = 4084
	MaxClustersFAT16 = 65524
	MaxClustersFAT32 = 0x0FFFFFF5 // entries 0x0FFFFFF7 and up are bad/EOC
)

// StateDirty is the bit Linux sets in the boot sector's state byte while a volume is mounted
// read-write; fsck.fat reports it as "not properly unmounted".
const StateDirty = 0x01

// BootSector is the BIOS parameter block and the extended boot record, for all three FAT types.
// The FAT32-only fields are zero on FAT12/16.
type BootSector struct {
	Jump              [3]byte
	OEMName           [8]byte
	BytesPerSector    uint16
	SectorsPerCluster uint8
	ReservedSectors   uint16
	NumFATs           uint8
	RootEntries       uint16
	TotalSectors16    uint16
	Media             uint8
	FATSize16         uint16
	SectorsPerTrack   uint16
	NumHeads          uint16
	HiddenSectors     uint32
	TotalSectors32    uint32

	// FAT32 extension.
	FATSize32        uint32
	ExtFlags         uint16
	FSVersion        uint16
	RootCluster      uint32
	FSInfoSector     uint16
	BackupBootSector uint16

	// Extended boot record (at 36 on FAT12/16, at 64 on FAT32).
	DriveNumber uint8
	State       uint8 // "reserved1"; Linux keeps the dirty bit here
	BootSig     uint8 // 0x29 when VolumeID, VolumeLabel and FSType are present
	VolumeID    uint32
	VolumeLabel [11]byte
	FSType      [8]byte
}

// IsFAT32Layout tells whether the BPB uses the FAT32 layout: FATSize16 is zero there.
func (b *BootSector) IsFAT32Layout() bool { return b.FATSize16 == 0 }

// ebrOffset is where the extended boot record starts.
func (b *BootSector) ebrOffset() int {
	if b.IsFAT32Layout() {
		return 64
	}
	return 36
}

// ParseBootSector decodes a boot sector. It checks only what is needed to read the fields; Geometry
// validates them.
func ParseBootSector(p []byte) (*BootSector, error) {
	if len(p) < 512 {
		return nil, fmt.Errorf("boot sector: %d bytes, need 512", len(p))
	}
	le := binary.LittleEndian
	b := &BootSector{}
	copy(b.Jump[:], p[0:3])
	copy(b.OEMName[:], p[3:11])
	b.BytesPerSector = le.Uint16(p[11:])
	b.SectorsPerCluster = p[13]
	b.ReservedSectors = le.Uint16(p[14:])
	b.NumFATs = p[16]
	b.RootEntries = le.Uint16(p[17:])
	b.TotalSectors16 = le.Uint16(p[19:])
	b.Media = p[21]
	b.FATSize16 = le.Uint16(p[22:])
	b.SectorsPerTrack = le.Uint16(p[24:])
	b.NumHeads = le.Uint16(p[26:])
	b.HiddenSectors = le.Uint32(p[28:])
	b.TotalSectors32 = le.Uint32(p[32:])
	if b.IsFAT32Layout() {
		b.FATSize32 = le.Uint32(p[36:])
		b.ExtFlags = le.Uint16(p[40:])
		b.FSVersion = le.Uint16(p[42:])
		b.RootCluster = le.Uint32(p[44:])
		b.FSInfoSector = le.Uint16(p[48:])
		b.BackupBootSector = le.Uint16(p[50:])
	}
	e := b.ebrOffset()
	b.DriveNumber = p[e]
	b.State = p[e+1]
	b.BootSig = p[e+2]
	if b.BootSig == 0x29 || b.BootSig == 0x28 {
		b.VolumeID = le.Uint32(p[e+3:])
	}
	if b.BootSig == 0x29 {
		copy(b.VolumeLabel[:], p[e+7:e+18])
		copy(b.FSType[:], p[e+18:e+26])
	}
	return b, nil
}

// HasSignature tells whether p ends its first 512 bytes with the 0x55 0xAA boot signature.
func HasSignature(p []byte) bool {
	return len(p) >= 512 && p[510] == 0x55 && p[511] == 0xAA
}

// StateOffset is the byte offset of the state (dirty) byte in a boot sector of this layout, so the
// engine can flip it without rewriting the rest.
func (b *BootSector) StateOffset() int { return b.ebrOffset() + 1 }

// Marshal writes the fields into p (at least 512 bytes), leaving the boot code area untouched, and
// sets the 0x55AA signature.
func (b *BootSector) Marshal(p []byte) {
	le := binary.LittleEndian
	copy(p[0:3], b.Jump[:])
	copy(p[3:11], b.OEMName[:])
	le.PutUint16(p[11:], b.BytesPerSector)
	p[13] = b.SectorsPerCluster
	le.PutUint16(p[14:], b.ReservedSectors)
	p[16] = b.NumFATs
	le.PutUint16(p[17:], b.RootEntries)
	le.PutUint16(p[19:], b.TotalSectors16)
	p[21] = b.Media
	le.PutUint16(p[22:], b.FATSize16)
	le.PutUint16(p[24:], b.SectorsPerTrack)
	le.PutUint16(p[26:], b.NumHeads)
	le.PutUint32(p[28:], b.HiddenSectors)
	le.PutUint32(p[32:], b.TotalSectors32)
	if b.IsFAT32Layout() {
		le.PutUint32(p[36:], b.FATSize32)
		le.PutUint16(p[40:], b.ExtFlags)
		le.PutUint16(p[42:], b.FSVersion)
		le.PutUint32(p[44:], b.RootCluster)
		le.PutUint16(p[48:], b.FSInfoSector)
		le.PutUint16(p[50:], b.BackupBootSector)
		clear(p[52:64])
	}
	e := b.ebrOffset()
	p[e] = b.DriveNumber
	p[e+1] = b.State
	p[e+2] = b.BootSig
	if b.BootSig == 0x29 || b.BootSig == 0x28 {
		le.PutUint32(p[e+3:], b.VolumeID)
	}
	if b.BootSig == 0x29 {
		copy(p[e+7:e+18], b.VolumeLabel[:])
		copy(p[e+18:e+26], b.FSType[:])
	}
	p[510], p[511] = 0x55, 0xAA
}

// Geometry is the layout of a volume, derived from a validated boot sector. Sector numbers are in
// logical sectors of SectorSize bytes from the start of the volume.
type Geometry struct {
	Type              FATType
	SectorSize        int
	SectorsPerCluster int
	ClusterSize       int
	ReservedSectors   int64
	NumFATs           int
	FATSectors        int64 // per copy
	RootDirSector     int64 // FAT12/16: first sector of the fixed root directory
	RootDirSectors    int64 // FAT12/16: its length; 0 on FAT32
	RootEntries       int   // FAT12/16
	RootCluster       uint32
	FirstDataSector   int64
	TotalSectors      int64
	Clusters          uint32 // data clusters, numbered 2 .. Clusters+1
	FSInfoSector      int64  // FAT32; 0 when absent
	BackupBootSector  int64  // FAT32; 0 when absent
	ActiveFAT         int    // FAT32 with mirroring off: the only FAT in use; else -1 (all mirrored)
}

// ErrNotFAT reports a boot sector that is not a FAT boot sector at all.
var ErrNotFAT = errors.New("not a FAT file system")

// Geometry validates the boot sector and derives the layout. volumeBytes is the size of the device
// (0 to skip the check that the volume fits on it).
func (b *BootSector) Geometry(volumeBytes int64) (Geometry, error) {
	var g Geometry
	bps := int(b.BytesPerSector)
	if bps < 512 || bps > 4096 || bps&(bps-1) != 0 {
		return g, fmt.Errorf("%w: bytes per sector %d is not a power of two from 512 to 4096", ErrNotFAT, bps)
	}
	spc := int(b.SectorsPerCluster)
	if spc == 0 || spc&(spc-1) != 0 {
		return g, fmt.Errorf("%w: sectors per cluster %d is not a power of two", ErrNotFAT, spc)
	}
	if bps*spc > 1<<21 {
		return g, fmt.Errorf("cluster size %d bytes is too large", bps*spc)
	}
	if b.ReservedSectors == 0 {
		return g, fmt.Errorf("%w: no reserved sectors", ErrNotFAT)
	}
	if b.NumFATs == 0 {
		return g, fmt.Errorf("%w: number of FATs is 0", ErrNotFAT)
	}
	if b.Media != 0xF0 && b.Media < 0xF8 {
		return g, fmt.Errorf("%w: media byte 0x%02X is invalid", ErrNotFAT, b.Media)
	}
	g.SectorSize = bps
	g.SectorsPerCluster = spc
	g.ClusterSize = bps * spc
	g.ReservedSectors = int64(b.ReservedSectors)
	g.NumFATs = int(b.NumFATs)
	g.ActiveFAT = -1
	g.TotalSectors = int64(b.TotalSectors16)
	if g.TotalSectors == 0 {
		g.TotalSectors = int64(b.TotalSectors32)
	}
	if g.TotalSectors == 0 {
		return g, fmt.Errorf("%w: total sectors is 0", ErrNotFAT)
	}
	if b.IsFAT32Layout() {
		g.FATSectors = int64(b.FATSize32)
		if b.RootEntries != 0 {
			return g, fmt.Errorf("FAT32 boot sector has %d fixed root entries, want 0", b.RootEntries)
		}
	} else {
		g.FATSectors = int64(b.FATSize16)
	}
	if g.FATSectors == 0 {
		return g, fmt.Errorf("%w: FAT size is 0", ErrNotFAT)
	}
	g.RootEntries = int(b.RootEntries)
	g.RootDirSectors = (int64(b.RootEntries)*32 + int64(bps) - 1) / int64(bps)
	g.RootDirSector = g.ReservedSectors + int64(g.NumFATs)*g.FATSectors
	g.FirstDataSector = g.RootDirSector + g.RootDirSectors
	if g.FirstDataSector >= g.TotalSectors {
		return g, fmt.Errorf("data area starts at sector %d, beyond the %d sectors of the volume", g.FirstDataSector, g.TotalSectors)
	}
	clusters := (g.TotalSectors - g.FirstDataSector) / int64(spc)
	if clusters == 0 {
		return g, fmt.Errorf("%w: no room for a data cluster after sector %d", ErrNotFAT, g.FirstDataSector)
	}
	if clusters > MaxClustersFAT32 {
		clusters = MaxClustersFAT32
	}
	g.Clusters = uint32(clusters)
	switch {
	case b.IsFAT32Layout():
		g.Type = FAT32
	case clusters <= MaxClustersFAT12:
		g.Type = FAT12
	case clusters <= MaxClustersFAT16:
		g.Type = FAT16
	default:
		return g, fmt.Errorf("%d clusters is too many for a FAT12/16 layout", clusters)
	}
	if g.Type == FAT32 {
		if b.FSVersion != 0 {
			return g, fmt.Errorf("FAT32 version %d.%d is not supported", b.FSVersion>>8, b.FSVersion&0xFF)
		}
		g.RootCluster = b.RootCluster
		if g.RootCluster < 2 || int64(g.RootCluster) > int64(g.Clusters)+1 {
			return g, fmt.Errorf("root directory cluster %d is outside the data area (2..%d)", g.RootCluster, g.Clusters+1)
		}
		if b.FSInfoSector != 0 && b.FSInfoSector != 0xFFFF && int64(b.FSInfoSector) < g.ReservedSectors {
			g.FSInfoSector = int64(b.FSInfoSector)
		}
		if b.BackupBootSector != 0 && b.BackupBootSector != 0xFFFF && int64(b.BackupBootSector) < g.ReservedSectors {
			g.BackupBootSector = int64(b.BackupBootSector)
		}
		if b.ExtFlags&0x80 != 0 {
			g.ActiveFAT = int(b.ExtFlags & 0x0F)
			if g.ActiveFAT >= g.NumFATs {
				return g, fmt.Errorf("active FAT %d does not exist (%d FATs)", g.ActiveFAT, g.NumFATs)
			}
		}
	} else if b.RootEntries == 0 {
		return g, fmt.Errorf("%s boot sector has no root directory entries", g.Type)
	}
	// The FAT must hold an entry for every cluster.
	need := (int64(g.Clusters) + 2) * int64(g.Type) / 8
	if int64(g.Type)*(int64(g.Clusters)+2)%8 != 0 {
		need++
	}
	if g.FATSectors*int64(bps) < need {
		return g, fmt.Errorf("FAT of %d sectors is too small for %d clusters (needs %d bytes)", g.FATSectors, g.Clusters, need)
	}
	if volumeBytes > 0 && g.TotalSectors*int64(bps) > volumeBytes {
		return g, fmt.Errorf("volume claims %d sectors (%d bytes) but the device has only %d bytes", g.TotalSectors, g.TotalSectors*int64(bps), volumeBytes)
	}
	return g, nil
}

// ClusterOffset is the byte offset of data cluster c (c >= 2).
func (g *Geometry) ClusterOffset(c uint32) int64 {
	return (g.FirstDataSector + int64(c-2)*int64(g.SectorsPerCluster)) * int64(g.SectorSize)
}

// FATOffset is the byte offset of FAT copy n.
func (g *Geometry) FATOffset(n int) int64 {
	return (g.ReservedSectors + int64(n)*g.FATSectors) * int64(g.SectorSize)
}

// FATBytes is the size of one FAT copy in bytes.
func (g *Geometry) FATBytes() int64 { return g.FATSectors * int64(g.SectorSize) }

// MaxCluster is the highest valid data cluster number.
func (g *Geometry) MaxCluster() uint32 { return g.Clusters + 1 }

// ValidCluster tells whether c names a data cluster.
func (g *Geometry) ValidCluster(c uint32) bool { return c >= 2 && c <= g.Clusters+1 }
