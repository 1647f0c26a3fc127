package fsck

import (
	"encoding/binary"
	"unicode/utf16"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// lfnState follows the long-name entries of one directory the way fsck.fat's lfn.c does:
// slot is the sequence number expected next (counting down), -1 when no long name is in
// progress and 0 when one is complete and waits for its short entry.
type lfnState struct {
	slot     int
	checksum byte
	units    []uint16 // 13 per slot, in name order
	offsets  []int64  // device offsets of the entries seen, in disk order
	dir      string   // path of the directory being read, for messages
	// lastOffsets are the offsets of the long name lfnGet returned last (reused: the records copy
	// what they keep).
	lastOffsets []int64
}

func (s *lfnState) reset(dir string) {
	s.slot = -1
	s.units = s.units[:0]
	s.offsets = s.offsets[:0]
	s.dir = dir
}

func (s *lfnState) clear() { s.reset(s.dir) }

func (s *lfnState) begin(slot int, checksum byte) {
	s.slot = slot
	s.checksum = checksum
	s.units = append(s.units[:0], make([]uint16, slot*ondisk.CharsPerLFN)...)
	s.offsets = s.offsets[:0]
}

// partial renders what has been collected so far, for messages.
func (s *lfnState) partial() string {
	if s.slot < 0 || s.slot*ondisk.CharsPerLFN > len(s.units) {
		return ""
	}
	return unitsToString(s.units[s.slot*ondisk.CharsPerLFN:])
}

func unitsToString(u []uint16) string {
	for i, c := range u {
		if c == 0 {
			u = u[:i]
			break
		}
	}
	return string(utf16.Decode(u))
}

// orphanCheck reports a long name that no short entry followed (fsck.fat deletes it).
func (c *checker) lfnOrphanCheck() {
	s := &c.lfn
	if s.slot == -1 {
		return
	}
	off := int64(-1)
	if len(s.offsets) > 0 {
		off = s.offsets[0]
	}
	c.problem(OrphanLFN, Error, s.dir, 0, off, "orphaned long file name part %q", s.partial())
	c.orphanLFNs = append(c.orphanLFNs, append([]int64(nil), s.offsets...))
	s.clear()
}

// lfnAddSlot takes one long-name entry (attribute exactly 0x0F, not free) at device offset off.
// Sequence and checksum inconsistencies are warnings: fsck.fat -n does not correct them.
// Non-zero reserved or cluster fields are errors: fsck.fat clears them.
func (c *checker) lfnAddSlot(raw []byte, off int64) {
	s := &c.lfn
	id := raw[0]
	slot := int(id & 0x1F)
	isStart := id&0x40 != 0
	sum := raw[13]
	if s.slot == 0 {
		c.lfnOrphanCheck()
	}
	switch {
	case isStart && slot != 0:
		if s.slot != -1 {
			c.problem(LFNOrder, Warning, s.dir, 0, off, "a new long file name starts within an old one (%q)", s.partial())
		}
		s.begin(slot, sum)
	case s.slot == -1 && slot != 0:
		part := unitsToString(lfnChars(raw))
		c.problem(LFNOrder, Warning, s.dir, 0, off, "long file name fragment %q found outside a long-name sequence (maybe the start bit is missing)", part)
		s.clear()
		return
	case slot != s.slot:
		c.problem(LFNOrder, Warning, s.dir, 0, off, "unexpected long file name sequence number (%d vs. expected %d)", slot, s.slot)
		s.clear()
		return
	}
	if sum != s.checksum {
		c.problem(LFNChecksum, Warning, s.dir, 0, off, "checksum in long file name part wrong (%02x vs. expected %02x)", sum, s.checksum)
	}
	s.slot--
	copy(s.units[s.slot*ondisk.CharsPerLFN:], lfnChars(raw))
	s.offsets = append(s.offsets, off)
	if raw[12] != 0 {
		c.problem(BadEntry, Error, s.dir, 0, off, "reserved field in a long file name entry is not 0 (but 0x%02x)", raw[12])
	}
	if v := binary.LittleEndian.Uint16(raw[26:]); v != 0 {
		c.problem(BadEntry, Error, s.dir, 0, off, "start cluster field in a long file name entry is not 0 (but 0x%04x)", v)
	}
}

func lfnChars(raw []byte) []uint16 {
	e := ondisk.DecodeLFN(raw)
	return e.Chars[:]
}

// lfnGet is called at a short entry: it returns the long name that belongs to it ("" if none)
// and the offset of its first long-name entry.
func (c *checker) lfnGet(name ondisk.ShortName, dir int32, shortName string, off int64) (string, int64) {
	s := &c.lfn
	s.lastOffsets = s.lastOffsets[:0]
	if s.slot == -1 {
		return "", -1
	}
	if s.slot != 0 {
		c.problem(LFNOrder, Warning, c.childPath(dir, shortName), 0, off, "unfinished long file name %q (its start may have been overwritten by %s)", s.partial(), displayShortName(name, 0))
		s.clear()
		return "", -1
	}
	long := unitsToString(s.units)
	if got := ondisk.LFNChecksum(name); got != s.checksum {
		// fsck.fat -n keeps the long name and changes nothing (its default choice matches no action).
		c.problem(LFNChecksum, Warning, c.childPath(dir, shortName), 0, s.offsets[0], "wrong checksum for long file name %q: entries carry %02x, short name %s sums to %02x", long, s.checksum, displayShortName(name, 0), got)
	}
	first := s.offsets[0]
	s.lastOffsets = append(s.lastOffsets[:0], s.offsets...)
	s.clear()
	return long, first
}
