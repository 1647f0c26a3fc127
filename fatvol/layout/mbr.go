package layout

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// The MBR's partition table: four 16-byte entries from byte 446.
const (
	mbrTableOffset = 446
	mbrEntrySize   = 16
	mbrProtective  = 0xEE
	// maxLogical bounds the logical partitions followed in an extended chain (Linux stops at
	// its partition limit, 256 minor numbers); a longer chain is taken as hostile.
	maxLogical = 128
)

// mbrEntry is one decoded entry: boot indicator, type, first sector and sector count.
type mbrEntry struct {
	boot, typ   byte
	start, size uint32
}

func mbrEntries(s []byte) [4]mbrEntry {
	var e [4]mbrEntry
	for i := range e {
		p := s[mbrTableOffset+i*mbrEntrySize:]
		e[i] = mbrEntry{boot: p[0], typ: p[4], start: binary.LittleEndian.Uint32(p[8:]), size: binary.LittleEndian.Uint32(p[12:])}
	}
	return e
}

// validBootIndicators: Linux's msdos_partition rejects a sector 0 whose entries have a boot
// indicator other than 0 or 0x80 (boot code or a BPB of some other file system, not a table).
func validBootIndicators(s []byte) bool {
	for _, e := range mbrEntries(s) {
		if e.boot != 0 && e.boot != 0x80 {
			return false
		}
	}
	return true
}

// hasProtectiveEntry: any entry of type 0xEE makes the medium a GPT one (libblkid's dos prober
// leaves such a table to the GPT prober; Linux's msdos parser refuses it).
func hasProtectiveEntry(s []byte) bool {
	for _, e := range mbrEntries(s) {
		if e.typ == mbrProtective {
			return true
		}
	}
	return false
}

func isExtended(typ byte) bool { return typ == 0x05 || typ == 0x0F || typ == 0x85 }

// extent is a span of sectors used in the overlap check.
type extent struct {
	start, end int64 // sectors, end exclusive
	what       string
}

// readMBR fills l from the table in sector 0 (s0) and the chain of its extended partition.
func readMBR(m Medium, s0 []byte, l *Layout) error {
	ss := int64(l.SectorSize)
	sectors := l.Size / ss
	l.DiskID = fmt.Sprintf("%08x", binary.LittleEndian.Uint32(s0[440:]))
	var primaries []extent
	var ext *extent
	for i, e := range mbrEntries(s0) {
		if e.size == 0 {
			continue // an unused slot, as Linux skips it
		}
		num := i + 1
		start, end := int64(e.start), int64(e.start)+int64(e.size)
		if start == 0 {
			return fmt.Errorf("layout: MBR partition %d starts at sector 0, over the table itself: %w", num, ErrInvalidTable)
		}
		if end > sectors {
			return fmt.Errorf("layout: MBR partition %d (sectors %d-%d) ends past the end of the medium (%d sectors): %w",
				num, start, end-1, sectors, ErrInvalidTable)
		}
		x := extent{start, end, fmt.Sprintf("partition %d", num)}
		primaries = append(primaries, x)
		if isExtended(e.typ) {
			if ext != nil {
				return fmt.Errorf("layout: MBR has two extended partitions (%s and %d): %w", ext.what, num, ErrInvalidTable)
			}
			ext = &x
			continue
		}
		l.Partitions = append(l.Partitions, Partition{Number: num, Start: start * ss, Size: (end - start) * ss, MBRType: e.typ})
	}
	if err := checkOverlaps(primaries); err != nil {
		return err
	}
	if ext != nil {
		if err := readLogical(m, *ext, l); err != nil {
			return err
		}
	}
	return nil
}

// readLogical follows the chain of extended boot records in ext: each holds one logical
// partition (relative to itself) and a link to the next record (relative to ext's start).
func readLogical(m Medium, ext extent, l *Layout) error {
	ss := int64(l.SectorSize)
	seen := map[int64]bool{}
	var logical []extent
	num := 5
	for ebr := ext.start; ebr != 0; {
		if seen[ebr] {
			return fmt.Errorf("layout: the chain of extended boot records loops back to sector %d: %w", ebr, ErrInvalidTable)
		}
		if len(seen) >= maxLogical {
			return fmt.Errorf("layout: more than %d extended boot records: %w", maxLogical, ErrInvalidTable)
		}
		seen[ebr] = true
		s, err := readSector(m, ebr, l.SectorSize)
		if err != nil {
			return err
		}
		if s[510] != 0x55 || s[511] != 0xAA {
			break // Linux ends the chain at a record without the signature
		}
		next, found := int64(0), false
		for _, e := range mbrEntries(s) {
			if e.size == 0 {
				continue
			}
			if isExtended(e.typ) {
				if next == 0 {
					next = ext.start + int64(e.start)
				}
				continue
			}
			if found {
				continue // one logical partition per record, as Linux takes it
			}
			found = true
			start, end := ebr+int64(e.start), ebr+int64(e.start)+int64(e.size)
			if e.start == 0 || start < ext.start || end > ext.end {
				return fmt.Errorf("layout: logical partition %d (sectors %d-%d) is not inside its extended partition (sectors %d-%d) after its record: %w",
					num, start, end-1, ext.start, ext.end-1, ErrInvalidTable)
			}
			logical = append(logical, extent{start, end, fmt.Sprintf("partition %d", num)})
			l.Partitions = append(l.Partitions, Partition{Number: num, Start: start * ss, Size: (end - start) * ss, MBRType: e.typ})
			num++
		}
		if next != 0 && (next < ext.start || next >= ext.end) {
			return fmt.Errorf("layout: extended boot record at sector %d links to sector %d, outside its extended partition (sectors %d-%d): %w",
				ebr, next, ext.start, ext.end-1, ErrInvalidTable)
		}
		ebr = next
	}
	return checkOverlaps(logical)
}

// checkOverlaps refuses two extents that share a sector.
func checkOverlaps(xs []extent) error {
	s := append([]extent(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i].start < s[j].start })
	for i := 1; i < len(s); i++ {
		if s[i].start < s[i-1].end {
			return fmt.Errorf("layout: %s (sectors %d-%d) overlaps %s (sectors %d-%d): %w",
				s[i].what, s[i].start, s[i].end-1, s[i-1].what, s[i-1].start, s[i-1].end-1, ErrInvalidTable)
		}
	}
	return nil
}
