package fsck

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// RepairResult is what Repair found and did.
type RepairResult struct {
	// Before is the check of the volume as it was.
	Before *Report
	// Unrepairable lists the errors Repair does not fix safely. When there is any, Repair
	// wrote nothing.
	Unrepairable []Problem
	// Repaired lists the errors fixed; empty when nothing was written.
	Repaired []Problem
	// After is the check of the volume after the repair; nil when nothing was written.
	After *Report
}

// Clean tells whether the volume is clean now: it was, or the repair left it so.
func (r *RepairResult) Clean() bool {
	if r.After != nil {
		return r.After.Clean()
	}
	return r.Before.Clean()
}

// Changed tells whether Repair wrote to the volume.
func (r *RepairResult) Changed() bool { return r.After != nil }

// Repair checks the volume on dev and, when every error it finds is of a kind it repairs
// safely (Problem.Repairable), repairs them as fsck.fat -a does, with one difference: lost
// clusters are freed, where fsck.fat -a saves each lost chain as a file FSCKnnnn.REC in the
// root directory. When any error is beyond that (cross-links, broken chains, bad entries, a
// broken boot sector, directory damage, ...) Repair writes nothing and lists them.
//
// The writes go in an order that leaves the volume no worse at any crash point: the dirty bit
// is set first (so an interrupted repair is found again), then interrupted renames are completed and
// orphaned long-name entries deleted (rename.go), then directory entries, flush, the
// FAT copies (the first, then the others), flush, FSINFO, flush, and only then the dirty bit
// is cleared, with a last flush. The volume is checked again afterwards (RepairResult.After).
func Repair(dev blockdev.Device) (*RepairResult, error) { return RepairWith(dev, Options{}) }

// RepairWith is Repair within the bounds of opts, its checks included.
func RepairWith(dev blockdev.Device, opts Options) (*RepairResult, error) {
	c, err := check(dev, opts)
	if err != nil {
		return nil, err
	}
	res := &RepairResult{Before: c.rep}
	if c.rep.Clean() {
		return res, nil
	}
	res.Unrepairable = c.rep.Unrepairable()
	if c.rep.omittedErrors {
		res.Unrepairable = append(res.Unrepairable, Problem{Kind: Limit, Severity: Error, EntryOffset: -1,
			Detail: fmt.Sprintf("%d problems beyond the first %d were not listed, so they cannot all be known to be safe to repair", c.rep.Omitted, maxProblems)})
	}
	if len(res.Unrepairable) > 0 {
		return res, nil
	}
	res.Repaired = c.rep.Errors()
	if err := c.writeRepair(); err != nil {
		return res, fmt.Errorf("fsck: repair: %w", err)
	}
	after, err := CheckWith(dev, opts)
	if err != nil {
		return res, fmt.Errorf("fsck: check after repair: %w", err)
	}
	res.After = after
	return res, nil
}

// writeRepair writes what the check changed in memory, in the order Repair describes.
func (c *checker) writeRepair() error {
	if err := c.setDirtyBit(true); err != nil {
		return err
	}
	if err := c.resolveInterrupted(); err != nil {
		return err
	}
	if err := c.writeEntries(); err != nil {
		return err
	}
	if err := c.flush(); err != nil {
		return err
	}
	if err := c.writeFAT(); err != nil {
		return err
	}
	if err := c.flush(); err != nil {
		return err
	}
	if err := c.writeFSInfo(); err != nil {
		return err
	}
	if err := c.flush(); err != nil {
		return err
	}
	if err := c.setDirtyBit(false); err != nil {
		return err
	}
	return c.flush()
}

// flush makes the writes since the last flush durable; without any it does nothing.
func (c *checker) flush() error {
	if !c.unflushed {
		return nil
	}
	if err := c.dev.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	c.unflushed = false
	return nil
}

func (c *checker) writeAt(p []byte, off int64) error {
	c.unflushed = true
	if _, err := c.dev.WriteAt(p, off); err != nil {
		return fmt.Errorf("write %d bytes at %d: %w", len(p), off, err)
	}
	return nil
}

// setDirtyBit sets or clears the dirty bit in the boot sector and, on FAT32, in its backup,
// writing only a state byte that differs.
func (c *checker) setDirtyBit(dirty bool) error {
	offs := []int64{0}
	if bb := int64(c.bs.BackupBootSector); c.g.Type == ondisk.FAT32 && bb != 0 && (bb+1)*int64(c.g.SectorSize) <= c.dev.Size() {
		offs = append(offs, bb*int64(c.g.SectorSize))
	}
	for _, base := range offs {
		off := base + int64(c.bs.StateOffset())
		var b [1]byte
		if err := c.readAt(b[:], off); err != nil {
			return err
		}
		want := b[0] &^ ondisk.StateDirty
		if dirty {
			want |= ondisk.StateDirty
		}
		if want == b[0] {
			continue
		}
		if err := c.writeAt([]byte{want}, off); err != nil {
			return err
		}
	}
	if dirty {
		return c.flush()
	}
	return nil
}

// writeEntries writes the start cluster and size of every directory entry the check changed:
// sizes cut to their chain, starts cleared where a file of size 0 had a chain.
func (c *checker) writeEntries() error {
	for i := int32(0); i < c.recs.len(); i++ {
		f := c.recs.at(i)
		if !f.entryChanged || f.entryOff < 0 {
			continue
		}
		var e [ondisk.DirEntrySize]byte
		if err := c.readAt(e[:], f.entryOff); err != nil {
			return err
		}
		le := binary.LittleEndian
		if c.g.Type == ondisk.FAT32 {
			le.PutUint16(e[20:], uint16(f.start>>16))
		}
		le.PutUint16(e[26:], uint16(f.start))
		le.PutUint32(e[28:], f.size)
		if err := c.writeAt(e[:], f.entryOff); err != nil {
			return err
		}
	}
	return nil
}

// writeFAT frees lost clusters and sets the clean-shutdown bit in the in-memory FAT, encodes it
// over the bytes of the copy in use, and writes every copy where it differs from that.
func (c *checker) writeFAT() error {
	limit := c.g.Clusters + 2
	for cl := uint32(2); cl < limit; cl++ {
		if v := c.fat.entries[cl]; c.owner[cl] == 0 && v != 0 && !c.fat.isBad(v) {
			c.fat.entries[cl] = 0 // lost: fsck.fat's reclaim_free
		}
	}
	switch c.g.Type {
	case ondisk.FAT16:
		c.fat.entries[1] |= 0x8000
	case ondisk.FAT32:
		c.fat.entries[1] |= 0x08000000
	}
	n := c.fatBytes()
	raw := bytes.Clone(c.fatRaw)
	c.fat.encode(c.g.Type, raw)
	raw = raw[:n]
	const chunk = 64 << 10
	have := make([]byte, chunk)
	for i := 0; i < c.g.NumFATs; i++ {
		base := c.g.FATOffset(i)
		for off := int64(0); off < n; off += chunk {
			want := raw[off:min(off+chunk, n)]
			p := have[:len(want)]
			if err := c.readAt(p, base+off); err != nil {
				return err
			}
			if bytes.Equal(p, want) {
				continue
			}
			if err := c.writeAt(want, base+off); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeFSInfo sets FSINFO's free count to the count after the repair, an invalid next-free hint
// to unknown, and broken signatures to their values (the hint then to 2, as fsck.fat does),
// keeping the sector's other bytes.
func (c *checker) writeFSInfo() error {
	if c.fsinfo == nil {
		return nil
	}
	p := bytes.Clone(c.fsinfo)
	next := binary.LittleEndian.Uint32(p[492:])
	if _, err := ondisk.ParseFSInfo(p); err != nil {
		next = 2 // fsck.fat's choice when it rewrites a broken FSINFO
	} else if next != ondisk.Unknown && !c.inData(next) {
		next = ondisk.Unknown
	}
	var fresh [512]byte
	ondisk.FSInfo{FreeCount: c.rep.FreeClusters, NextFree: next}.Marshal(fresh[:])
	for _, r := range [][2]int{{0, 4}, {484, 496}, {508, 512}} { // signatures, free count, hint
		copy(p[r[0]:r[1]], fresh[r[0]:r[1]])
	}
	if bytes.Equal(p, c.fsinfo) {
		return nil
	}
	return c.writeAt(p, c.fsinfoOff)
}

// encode writes the entries into raw, a copy of the FAT's bytes: FAT12 entries share bytes
// with their neighbours, and the top 4 bits of FAT32 entries are reserved and kept.
func (f *fatTable) encode(t ondisk.FATType, raw []byte) {
	le := binary.LittleEndian
	for c, v := range f.entries {
		switch t {
		case ondisk.FAT12:
			off := c * 3 / 2
			if c&1 == 0 {
				raw[off] = byte(v)
				raw[off+1] = raw[off+1]&0xF0 | byte(v>>8)&0x0F
			} else {
				raw[off] = raw[off]&0x0F | byte(v<<4)
				raw[off+1] = byte(v >> 4)
			}
		case ondisk.FAT16:
			le.PutUint16(raw[c*2:], uint16(v))
		default:
			le.PutUint32(raw[c*4:], le.Uint32(raw[c*4:])&0xF0000000|v&0x0FFFFFFF)
		}
	}
}
