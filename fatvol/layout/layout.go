// Package layout finds where the FAT file systems on a medium are: the whole medium (a
// "superfloppy", as Windows formats removable drives), or partitions of an MBR or GPT partition
// table (as SD cards and most sticks ship), by the rules Linux's partition code and libblkid
// follow. It reads only the few sectors it needs and never trusts a table: overlaps, partitions
// past the end of the medium, loops in a chain of extended partitions and absurd entry counts are
// errors, never a panic or a huge allocation.
package layout

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Medium is what a layout is read from: blockdev.Device has these methods.
type Medium interface {
	ReadAt(p []byte, off int64) (int, error)
	Size() int64
	LogicalBlockSize() int
}

// FileMedium is a Medium read from an open file, with the size and logical block size its opener
// found (a block device's stat size is 0).
type FileMedium struct {
	File      *os.File
	Bytes     int64
	BlockSize int
}

func (m FileMedium) ReadAt(p []byte, off int64) (int, error) { return m.File.ReadAt(p, off) }
func (m FileMedium) Size() int64                             { return m.Bytes }
func (m FileMedium) LogicalBlockSize() int                   { return m.BlockSize }

// Kind is how a medium is laid out.
type Kind int

const (
	// Unknown: neither a FAT boot sector nor a partition table at sector 0 (Probe says more).
	Unknown Kind = iota
	// Superfloppy: a FAT file system from sector 0, no partition table (even when the boot sector
	// ends with 0x55AA, as every FAT boot sector does).
	Superfloppy
	// MBR: a DOS partition table in sector 0.
	MBR
	// GPT: a protective MBR and a GUID partition table.
	GPT
)

func (k Kind) String() string {
	switch k {
	case Superfloppy:
		return "superfloppy"
	case MBR:
		return "MBR"
	case GPT:
		return "GPT"
	}
	return "unknown"
}

// article is the kind with its indefinite article, for messages.
func (k Kind) article() string {
	if k == MBR {
		return "an MBR"
	}
	return "a " + k.String()
}

// ErrInvalidTable is wrapped by every error about a partition table that cannot be trusted.
var ErrInvalidTable = errors.New("invalid partition table")

// Layout is what Read found on a medium.
type Layout struct {
	Kind       Kind
	SectorSize int   // the unit of the table's sector numbers: the medium's logical block size
	Size       int64 // bytes of the medium
	// DiskID identifies the table: the MBR's disk signature as 8 hex digits, the GPT's disk GUID.
	DiskID string
	// BackupGPT: the primary GPT header or its entries were damaged and the backup at the last
	// sector was used (libblkid does so; the kernel only with the "gpt" boot option).
	BackupGPT bool
	// Partitions in table order: MBR primaries 1-4 then logical ones from 5 (Linux's numbering),
	// GPT entries by index from 1. Unused slots and extended-partition containers are left out.
	// A superfloppy has one, number 0, spanning the medium.
	Partitions []Partition
}

// Partition is one partition of a table.
type Partition struct {
	// Number is Linux's partition number (sdb1 is 1); 0 for a superfloppy's whole medium.
	Number int
	Start  int64 // bytes from the start of the medium
	Size   int64 // bytes
	// MBRType is the MBR type byte (0 on GPT); TypeGUID and GUID are the GPT type and unique
	// partition GUIDs (empty on MBR), Name the GPT partition name.
	MBRType        byte
	TypeGUID, GUID string
	Name           string
}

// FAT types of MBR entries: FAT12, FAT16 < 32 MiB, FAT16, FAT32 (CHS), FAT32 (LBA), FAT16 (LBA),
// and their hidden variants (0x10 added), which OS/2 Boot Manager and some vendor tools write.
var fatMBRTypes = map[byte]string{
	0x01: "FAT12", 0x04: "FAT16 <32M", 0x06: "FAT16", 0x0B: "W95 FAT32", 0x0C: "W95 FAT32 (LBA)", 0x0E: "W95 FAT16 (LBA)",
	0x11: "Hidden FAT12", 0x14: "Hidden FAT16 <32M", 0x16: "Hidden FAT16", 0x1B: "Hidden W95 FAT32",
	0x1C: "Hidden W95 FAT32 (LBA)", 0x1E: "Hidden W95 FAT16 (LBA)",
}

// GPT partition types that hold FAT file systems.
const (
	// GUIDBasicData is Microsoft basic data: FAT, exFAT or NTFS.
	GUIDBasicData = "EBD0A0A2-B9E5-4433-87C0-68B6B72699C7"
	// GUIDEFISystem is the EFI system partition, FAT by the UEFI specification.
	GUIDEFISystem = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
)

// IsFATType tells whether the partition's type says it may hold FAT (by type only: a basic data
// partition may as well hold NTFS or exFAT; IsFAT reads the boot sector).
func (p Partition) IsFATType() bool {
	if p.TypeGUID != "" {
		return p.TypeGUID == GUIDBasicData || p.TypeGUID == GUIDEFISystem
	}
	if p.Number == 0 {
		return true
	}
	_, ok := fatMBRTypes[p.MBRType]
	return ok
}

// TypeName names the partition's type for messages.
func (p Partition) TypeName() string {
	switch {
	case p.Number == 0:
		return "whole medium"
	case p.TypeGUID == GUIDBasicData:
		return "Microsoft basic data"
	case p.TypeGUID == GUIDEFISystem:
		return "EFI System"
	case p.TypeGUID != "":
		if n, ok := gptTypeNames[p.TypeGUID]; ok {
			return n
		}
		return "type " + p.TypeGUID
	}
	if n, ok := fatMBRTypes[p.MBRType]; ok {
		return fmt.Sprintf("%s (0x%02x)", n, p.MBRType)
	}
	if n, ok := mbrTypeNames[p.MBRType]; ok {
		return fmt.Sprintf("%s (0x%02x)", n, p.MBRType)
	}
	return fmt.Sprintf("type 0x%02x", p.MBRType)
}

// Other common types, only to name them in messages.
var (
	mbrTypeNames = map[byte]string{
		0x07: "HPFS/NTFS/exFAT", 0x0F: "W95 Ext'd (LBA)", 0x05: "Extended", 0x17: "Hidden HPFS/NTFS",
		0x82: "Linux swap", 0x83: "Linux", 0x85: "Linux extended", 0x8E: "Linux LVM", 0xA5: "FreeBSD",
		0xAF: "HFS / HFS+", 0xEE: "GPT", 0xEF: "EFI (FAT-12/16/32)", 0xFD: "Linux raid autodetect",
	}
	gptTypeNames = map[string]string{
		"0FC63DAF-8483-4772-8E79-3D69D8477DE4": "Linux filesystem",
		"0657FD6D-A4AB-43C4-84E5-0933C84B4F4F": "Linux swap",
		"E6D6D379-F507-44C2-A23C-238F2A3DF928": "Linux LVM",
		"A19D880F-05FC-4D3B-A006-743F0F84911E": "Linux RAID",
		"E3C9E316-0B5C-4DB8-817D-F92DF00215AE": "Microsoft reserved",
		"21686148-6449-6E6F-744E-656564454649": "BIOS boot",
		"CA7D7CCB-63ED-4C53-861C-1742536059CC": "Linux LUKS",
	}
)

// ID is the partition's identity on its medium: the GPT unique GUID, else its number.
func (p Partition) ID() string {
	if p.GUID != "" {
		return p.GUID
	}
	return strconv.Itoa(p.Number)
}

func (p Partition) String() string {
	if p.Number == 0 {
		return fmt.Sprintf("whole medium (%d bytes)", p.Size)
	}
	s := fmt.Sprintf("partition %d (%s, %d bytes at %d)", p.Number, p.TypeName(), p.Size, p.Start)
	if p.GUID != "" {
		s = fmt.Sprintf("partition %d (%s %s, %d bytes at %d)", p.Number, p.TypeName(), p.GUID, p.Size, p.Start)
	}
	return s
}

// Read finds the layout of m: a FAT boot sector at sector 0 makes a superfloppy (libblkid
// ignores the MBR of a valid FAT boot sector, whose 0x55AA and boot code look like one); a
// protective MBR entry (type 0xEE) a GPT, read from the primary header or, when that or its
// entries are damaged, from the backup; else the MBR's primary partitions and the logical ones
// of its extended partition. No 0x55AA signature and no FAT boot sector is Unknown.
func Read(m Medium) (*Layout, error) {
	ss := m.LogicalBlockSize()
	if ss < 512 || ss > 64<<10 || ss&(ss-1) != 0 {
		return nil, fmt.Errorf("layout: logical block size %d is not a power of two from 512", ss)
	}
	l := &Layout{SectorSize: ss, Size: m.Size()}
	if l.Size < int64(ss) {
		return l, nil
	}
	s0, err := readSector(m, 0, ss)
	if err != nil {
		return nil, err
	}
	if IsFATBootSector(s0) {
		l.Kind = Superfloppy
		l.Partitions = []Partition{{Number: 0, Start: 0, Size: l.Size}}
		return l, nil
	}
	if !ondisk.HasSignature(s0) || !validBootIndicators(s0) {
		return l, nil
	}
	if hasProtectiveEntry(s0) {
		l.Kind = GPT
		if err := readGPT(m, l); err != nil {
			return nil, err
		}
		return l, nil
	}
	l.Kind = MBR
	if err := readMBR(m, s0, l); err != nil {
		return nil, err
	}
	return l, nil
}

// IsFATBootSector tells whether p (sector 0 of a volume) is a FAT boot sector: a BIOS parameter block with a valid sector size, cluster size, reserved sectors,
// FAT count and media byte (libblkid's test; the kernel's fat_valid_media and more).
func IsFATBootSector(p []byte) bool {
	bs, err := ondisk.ParseBootSector(p)
	if err != nil {
		return false
	}
	if _, err := bs.Geometry(0); err != nil {
		return false
	}
	// Some formatters (OS/2, DFSee) put a FAT-like pseudo BPB before JFS and HPFS: libblkid
	// refuses those by their name at the FAT16 file system type field.
	if name := string(p[54:62]); name == "JFS     " || name == "HPFS    " {
		return false
	}
	return true
}

// readSector reads one sector of ss bytes at sector n.
func readSector(m Medium, n int64, ss int) ([]byte, error) {
	p := make([]byte, ss)
	if err := readFull(m, p, n*int64(ss)); err != nil {
		return nil, err
	}
	return p, nil
}

// readFull reads len(p) bytes at off, inside the medium.
func readFull(m Medium, p []byte, off int64) error {
	if off < 0 || off > m.Size()-int64(len(p)) {
		return fmt.Errorf("layout: read of %d bytes at %d is past the end of the %d-byte medium: %w", len(p), off, m.Size(), ErrInvalidTable)
	}
	n, err := m.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("layout: read at %d: %w", off, err)
}

// Partition returns the partition named by sel: its number, or a GPT partition's unique GUID
// (any case).
func (l *Layout) Partition(sel string) (Partition, bool) {
	for _, p := range l.Partitions {
		if p.Number == 0 {
			continue
		}
		if strconv.Itoa(p.Number) == sel || (p.GUID != "" && strings.EqualFold(p.GUID, sel)) {
			return p, true
		}
	}
	return Partition{}, false
}

// Describe names the layout and its partitions for messages.
func (l *Layout) Describe() string {
	switch l.Kind {
	case Unknown:
		return "no partition table and no FAT boot sector"
	case Superfloppy:
		return "a FAT file system on the whole medium (superfloppy)"
	}
	if len(l.Partitions) == 0 {
		return fmt.Sprintf("%s partition table with no partitions", l.Kind.article())
	}
	parts := make([]string, len(l.Partitions))
	for i, p := range l.Partitions {
		parts[i] = p.String()
	}
	return fmt.Sprintf("%s partition table with %s", l.Kind.article(), strings.Join(parts, ", "))
}
