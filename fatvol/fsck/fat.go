package fsck

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// fatTable is the FAT decoded into one entry per cluster (FAT32 entries without their reserved
// top 4 bits), with the special values of its width.
type fatTable struct {
	entries []uint32
	extd    uint32 // fsck.fat's FAT_EXTD: the all-ones value less its low 4 bits
	bad     uint32 // the bad-cluster mark
}

func newFATTable(t ondisk.FATType, n uint32) fatTable {
	bits := uint(t)
	if t == ondisk.FAT32 {
		bits = 28
	}
	extd := (uint32(1)<<bits - 1) &^ 0xF
	return fatTable{entries: make([]uint32, n), extd: extd, bad: extd | 0x7}
}

func (f *fatTable) isBad(v uint32) bool { return v == f.bad }
func (f *fatTable) isEOC(v uint32) bool { return v >= f.extd|0x8 }
func (f *fatTable) eoc() uint32         { return f.extd | 0x8 } // fsck.fat's FAT_EOF

// decodeFAT fills entries from the raw bytes of a FAT copy.
func (f *fatTable) decode(t ondisk.FATType, raw []byte) {
	le := binary.LittleEndian
	for c := range f.entries {
		switch t {
		case ondisk.FAT12:
			off := c * 3 / 2
			v := uint32(raw[off]) | uint32(raw[off+1])<<8
			if c&1 != 0 {
				v >>= 4
			}
			f.entries[c] = v & 0xFFF
		case ondisk.FAT16:
			f.entries[c] = uint32(le.Uint16(raw[c*2:]))
		default:
			f.entries[c] = le.Uint32(raw[c*4:]) & 0x0FFFFFFF
		}
	}
}

// fatBytes is how many bytes of a FAT copy hold the entries of clusters 0..Clusters+1: what
// fsck.fat reads and compares.
func (c *checker) fatBytes() int64 {
	return (int64(c.g.Clusters+2)*int64(c.g.Type) + 7) / 8
}

// headerOK is fsck.fat's test of a FAT copy: FAT[0] must have all the bits above the media
// byte set.
func (f *fatTable) headerOK(v0 uint32) bool { return v0&f.extd == f.extd }

// loadFAT reads the first FAT, compares the other copies with it, checks FAT[0] and the range
// of every entry. Out-of-range links are set to end-of-chain in memory, as fsck.fat does
// before it walks the directories.
func (c *checker) loadFAT() error {
	n := c.fatBytes()
	// The FAT as read, its entries and their owners, and a chunk of another copy at a time.
	c.fixedBytes = n + 1 + 8*int64(c.g.Clusters+2) + fatCompareChunk
	if c.maxMemory > 0 && c.fixedBytes > c.maxMemory {
		return fmt.Errorf("fsck: %w: a FAT of %d clusters takes %d MiB to check, the check may use %d MiB", ErrMemory, c.g.Clusters, mib(c.fixedBytes), mib(c.maxMemory))
	}
	first := make([]byte, n+1) // +1: FAT12 decoding reads a byte past the last entry
	if err := c.readAt(first[:n], c.g.FATOffset(0)); err != nil {
		return err
	}
	c.fat = newFATTable(c.g.Type, c.g.Clusters+2)
	c.fat.decode(c.g.Type, first)
	firstOK := c.fat.headerOK(c.fat.entries[0])
	used := first
	if c.g.NumFATs > 1 {
		differs, at, secondHeader, err := c.compareFATCopy(1, first[:n])
		if err != nil {
			return err
		}
		secondOK := c.fat.headerOK(secondHeader)
		switch {
		case !firstOK && !secondOK:
			c.problem(FATHeader, Error, "", 0, -1, "both FATs appear to be corrupt: FAT[0] is 0x%X, media byte 0x%02X", c.fat.entries[0], c.bs.Media)
		case differs && !firstOK && secondOK:
			c.problem(FATMismatch, Error, "", at, -1, "FATs differ (first at cluster %d) and the first FAT's header is corrupt; the second FAT is used", at)
			c.notRepairable()
			used = make([]byte, n+1)
			if err := c.readAt(used[:n], c.g.FATOffset(1)); err != nil {
				return err
			}
			c.fat.decode(c.g.Type, used)
		case differs:
			c.problem(FATMismatch, Error, "", at, -1, "FATs differ (first at cluster %d); the first FAT is used", at)
		}
		for i := 2; i < c.g.NumFATs; i++ {
			if differs, at, _, err := c.compareFATCopy(i, first[:n]); err != nil {
				return err
			} else if differs {
				c.problem(FATMismatch, Error, "", at, -1, "FAT copy %d differs from the first (first at cluster %d)", i+1, at)
			}
		}
	} else if !firstOK {
		c.problem(FATHeader, Error, "", 0, -1, "the only FAT appears to be corrupt: FAT[0] is 0x%X", c.fat.entries[0])
	}
	if v0 := c.fat.entries[0]; c.fat.headerOK(v0) && v0&0xFF != uint32(c.bs.Media) {
		// fsck.fat does not compare them; Microsoft's spec wants FAT[0] to carry the media byte.
		c.problem(FATHeader, Warning, "", 0, -1, "FAT[0] is 0x%X but the boot sector's media byte is 0x%02X", v0, c.bs.Media)
	}
	c.fatRaw = used
	c.owner = make([]uint32, c.g.Clusters+2)
	limit := c.g.Clusters + 2
	for cl := uint32(2); cl < limit; cl++ {
		v := c.fat.entries[cl]
		if v == 1 || (v >= limit && v < c.fat.bad) {
			c.problem(ClusterOutOfRange, Error, "", cl, -1, "cluster %d links to %d, out of range (2..%d)", cl, v, limit-1)
			c.fat.entries[cl] = c.fat.eoc()
		}
	}
	return nil
}

// fatCompareChunk is how much of another FAT copy is read at a time.
const fatCompareChunk = 4 << 20

// mib rounds bytes up to MiB, for messages.
func mib(bytes int64) int64 { return (bytes + 1<<20 - 1) >> 20 }

// compareFATCopy compares FAT copy i with the first, a chunk at a time so that only one copy
// is held in memory. It returns whether they differ, the first differing cluster and copy i's
// FAT[0].
func (c *checker) compareFATCopy(i int, first []byte) (bool, uint32, uint32, error) {
	const chunk = fatCompareChunk
	buf := make([]byte, min(int64(chunk), int64(len(first))))
	base := c.g.FATOffset(i)
	var header uint32
	differs, at := false, uint32(0)
	for off := int64(0); off < int64(len(first)); off += int64(len(buf)) {
		p := buf[:min(int64(len(buf)), int64(len(first))-off)]
		if err := c.readAt(p, base+off); err != nil {
			return false, 0, 0, err
		}
		if off == 0 {
			var hdr [4]byte
			copy(hdr[:], p)
			switch c.g.Type {
			case ondisk.FAT12:
				header = (uint32(hdr[0]) | uint32(hdr[1])<<8) & 0xFFF
			case ondisk.FAT16:
				header = uint32(binary.LittleEndian.Uint16(hdr[:]))
			default:
				header = binary.LittleEndian.Uint32(hdr[:]) & 0x0FFFFFFF
			}
		}
		if !differs && !bytes.Equal(p, first[off:off+int64(len(p))]) {
			differs = true
			for j := range p {
				if p[j] != first[off+int64(j)] {
					at = uint32((off + int64(j)) * 8 / int64(c.g.Type))
					break
				}
			}
		}
		if differs {
			break // the header was taken from the first chunk
		}
	}
	return differs, at, header, nil
}
