package ondisk

import (
	"encoding/binary"
	"time"
)

// DirEntrySize is the size of one directory entry; long-name entries have the same size.
const DirEntrySize = 32

// Attribute bits of a directory entry.
const (
	AttrReadOnly  = 0x01
	AttrHidden    = 0x02
	AttrSystem    = 0x04
	AttrVolumeID  = 0x08
	AttrDirectory = 0x10
	AttrArchive   = 0x20
	AttrLongName  = AttrReadOnly | AttrHidden | AttrSystem | AttrVolumeID
	attrLongMask  = 0x3F
)

// NT case bits (byte 12): Windows NT stores an all-lowercase base or extension as a short name
// plus these bits instead of a long name.
const (
	CaseLowerBase = 0x08
	CaseLowerExt  = 0x10
)

// RenameNew marks, in a bit of byte 12 that Linux, mtools, Windows and fsck.fat leave alone, the
// new entry of a rename while the old one may still be on the disk: two entries with the same
// first cluster, size and attributes, exactly one of them marked, are a rename a crash cut short,
// and the marked one is kept. The bit is cleared once the old entry's removal is durable.
const RenameNew = 0x40

// First-byte markers of a directory entry.
const (
	markEnd     = 0x00 // this and all following entries are free
	markDeleted = 0xE5
	markKanji   = 0x05 // stands for a real 0xE5 as first name byte
)

// ShortName is an 8.3 name as stored: 8 bytes of base and 3 of extension, space padded, in the
// OEM code page, with a leading 0xE5 stored as 0x05.
type ShortName [11]byte

// DirEntry is a decoded 32-byte short directory entry.
type DirEntry struct {
	Name        ShortName
	Attr        uint8
	NTCase      uint8
	CreateTenth uint8 // 10 ms units, 0..199
	CreateTime  uint16
	CreateDate  uint16
	AccessDate  uint16
	ClusterHi   uint16
	ModTime     uint16
	ModDate     uint16
	ClusterLo   uint16
	Size        uint32
}

// DecodeDirEntry decodes p[:32].
func DecodeDirEntry(p []byte) DirEntry {
	le := binary.LittleEndian
	var e DirEntry
	copy(e.Name[:], p[0:11])
	e.Attr = p[11]
	e.NTCase = p[12]
	e.CreateTenth = p[13]
	e.CreateTime = le.Uint16(p[14:])
	e.CreateDate = le.Uint16(p[16:])
	e.AccessDate = le.Uint16(p[18:])
	e.ClusterHi = le.Uint16(p[20:])
	e.ModTime = le.Uint16(p[22:])
	e.ModDate = le.Uint16(p[24:])
	e.ClusterLo = le.Uint16(p[26:])
	e.Size = le.Uint32(p[28:])
	return e
}

// Encode writes the entry into p[:32].
func (e *DirEntry) Encode(p []byte) {
	le := binary.LittleEndian
	copy(p[0:11], e.Name[:])
	p[11] = e.Attr
	p[12] = e.NTCase
	p[13] = e.CreateTenth
	le.PutUint16(p[14:], e.CreateTime)
	le.PutUint16(p[16:], e.CreateDate)
	le.PutUint16(p[18:], e.AccessDate)
	le.PutUint16(p[20:], e.ClusterHi)
	le.PutUint16(p[22:], e.ModTime)
	le.PutUint16(p[24:], e.ModDate)
	le.PutUint16(p[26:], e.ClusterLo)
	le.PutUint32(p[28:], e.Size)
}

// Cluster is the entry's first cluster. The high half counts on FAT32 only: on FAT12/16 those
// bytes are the OS/2 extended-attribute handle and must be ignored.
func (e *DirEntry) Cluster(t FATType) uint32 {
	if t == FAT32 {
		return uint32(e.ClusterHi)<<16 | uint32(e.ClusterLo)
	}
	return uint32(e.ClusterLo)
}

// SetCluster stores c as the first cluster.
func (e *DirEntry) SetCluster(c uint32) {
	e.ClusterHi = uint16(c >> 16)
	e.ClusterLo = uint16(c)
}

// IsDir tells whether the entry is a directory.
func (e *DirEntry) IsDir() bool { return e.Attr&AttrDirectory != 0 }

// IsLongName tells whether the raw entry p is a long-name entry.
func IsLongName(p []byte) bool { return p[11]&attrLongMask == AttrLongName }

// IsEnd tells whether the raw entry p marks the end of the directory.
func IsEnd(p []byte) bool { return p[0] == markEnd }

// IsDeleted tells whether the raw entry p is a deleted (free) entry.
func IsDeleted(p []byte) bool { return p[0] == markDeleted }

// MarkDeleted frees the raw entry p.
func MarkDeleted(p []byte) { p[0] = markDeleted }

// IsVolumeLabel tells whether the short entry is the volume label.
func (e *DirEntry) IsVolumeLabel() bool { return e.Attr&(AttrVolumeID|AttrDirectory) == AttrVolumeID }

// Dot and DotDot are the names of a directory's first two entries.
var (
	Dot    = ShortName{'.', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '}
	DotDot = ShortName{'.', '.', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '}
)

// EncodeDate and EncodeTime give FAT's date and time fields for t in loc: dates count from 1980
// (earlier times clamp to 1980-01-01 00:00:00, later than 2107 to 2107-12-31 23:59:58); times have
// 2-second resolution, and tenth gives the creation time's 10 ms field (0..199).
func EncodeTime(t time.Time, loc *time.Location) (date, tm uint16, tenth uint8) {
	t = t.In(loc)
	if t.Year() < 1980 {
		return 1<<5 | 1, 0, 0
	}
	if t.Year() > 2107 {
		return 127<<9 | 12<<5 | 31, 23<<11 | 59<<5 | 29, 199
	}
	date = uint16(t.Year()-1980)<<9 | uint16(t.Month())<<5 | uint16(t.Day())
	tm = uint16(t.Hour())<<11 | uint16(t.Minute())<<5 | uint16(t.Second()/2)
	tenth = uint8((t.Second()%2)*100 + t.Nanosecond()/10_000_000)
	return date, tm, tenth
}

// DecodeTime turns FAT's date, time and 10 ms fields into a time in loc. A zero date is the zero
// time.Time; fields out of range are clamped the way Linux does.
func DecodeTime(date, tm uint16, tenth uint8, loc *time.Location) time.Time {
	if date == 0 {
		return time.Time{}
	}
	year := 1980 + int(date>>9)
	month := time.Month(max(1, min(12, int(date>>5&0x0F))))
	day := max(1, int(date&0x1F))
	hour := int(tm >> 11)
	minute := int(tm >> 5 & 0x3F)
	sec := int(tm&0x1F) * 2
	ms := int(tenth) * 10
	if tenth > 199 {
		ms = 0
	}
	return time.Date(year, month, day, hour, minute, sec, ms*int(time.Millisecond), loc)
}
