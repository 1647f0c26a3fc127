package ondisk

import (
	"encoding/binary"
	"unicode/utf16"
)

// LFN layout: each long-name entry holds 13 UTF-16 code units at these byte offsets.
var lfnCharOffsets = [13]int{1, 3, 5, 7, 9, 14, 16, 18, 20, 22, 24, 28, 30}

const (
	lfnLastFlag  = 0x40
	lfnOrdMask   = 0x1F
	CharsPerLFN  = 13
	MaxLFNUnits  = 255 // longest long name in UTF-16 units
	MaxLFNSlots  = (MaxLFNUnits + CharsPerLFN - 1) / CharsPerLFN
	lfnPadding   = 0xFFFF
	lfnTerminate = 0x0000
)

// LFNEntry is a decoded long-name entry.
type LFNEntry struct {
	Ord      uint8 // 1-based sequence number, without the last flag
	Last     bool  // the first entry on disk, holding the end of the name
	Checksum uint8
	Chars    [CharsPerLFN]uint16
}

// DecodeLFN decodes the raw long-name entry p[:32].
func DecodeLFN(p []byte) LFNEntry {
	le := binary.LittleEndian
	e := LFNEntry{Ord: p[0] & lfnOrdMask, Last: p[0]&lfnLastFlag != 0, Checksum: p[13]}
	for i, off := range lfnCharOffsets {
		e.Chars[i] = le.Uint16(p[off:])
	}
	return e
}

// Encode writes the entry into p[:32].
func (e *LFNEntry) Encode(p []byte) {
	le := binary.LittleEndian
	clear(p[:32])
	p[0] = e.Ord
	if e.Last {
		p[0] |= lfnLastFlag
	}
	p[11] = AttrLongName
	p[13] = e.Checksum
	for i, off := range lfnCharOffsets {
		le.PutUint16(p[off:], e.Chars[i])
	}
}

// LFNChecksum is the checksum of a short name that every long-name entry of it carries.
func LFNChecksum(s ShortName) byte {
	var sum byte
	for _, c := range s {
		sum = (sum>>1 | sum<<7) + c
	}
	return sum
}

// LFNEntries splits a long name into its entries in on-disk order (the last part first), each with
// the short name's checksum. The caller has checked that the name is valid and at most 255 UTF-16
// units long.
func LFNEntries(name string, sum byte) []LFNEntry {
	units := utf16.Encode([]rune(name))
	n := (len(units) + CharsPerLFN - 1) / CharsPerLFN
	out := make([]LFNEntry, n)
	for i := 0; i < n; i++ {
		e := LFNEntry{Ord: uint8(i + 1), Last: i == n-1, Checksum: sum}
		for j := 0; j < CharsPerLFN; j++ {
			k := i*CharsPerLFN + j
			switch {
			case k < len(units):
				e.Chars[j] = units[k]
			case k == len(units):
				e.Chars[j] = lfnTerminate
			default:
				e.Chars[j] = lfnPadding
			}
		}
		out[n-1-i] = e
	}
	return out
}

// LFNUnits returns the UTF-16 units of e up to its terminator, and whether they were padded the
// way the format requires (one NUL, then 0xFFFF).
func (e *LFNEntry) LFNUnits() []uint16 {
	for i, c := range e.Chars {
		if c == lfnTerminate {
			return e.Chars[:i]
		}
	}
	return e.Chars[:]
}

// UTF16Len is the length of name in UTF-16 code units, the unit of FAT's 255 limit.
func UTF16Len(name string) int {
	n := 0
	for _, r := range name {
		n += utf16.RuneLen(r)
	}
	return n
}
