package fatvol

import (
	"bytes"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Names that cross sectors. A name's long-name entries and its short entry are placed in one
// sector when a run of free entries there allows (one write then puts or takes the name whole);
// otherwise the name crosses into the next sector (or cluster), as vfat places names, so that a
// directory holds what the format allows. The writes of such a name are ordered at writeback:
//
//   - created: the sectors that hold only its long-name entries go first, with its entries in the
//     short entry's sector written as deleted; then a flush; then those. A cut in between leaves orphaned
//     long-name entries, which fsck deletes, never a short entry without its long name;
//   - removed: the short entry's removal goes first, with the long-name entries before its sector
//     written as they were; then a flush; then their removal. A cut in between leaves orphaned
//     long-name entries too.
//
// A writeback with such names pays one flush more: one for all of them.

// crossing is a name whose entries cross sectors, created or removed since the last writeback of
// directories: [start, first) are its long-name entries in the sectors before the short entry's,
// off the short entry; lfns, for a removal, those entries as they were.
type crossing struct {
	d            *dirContent
	start, first int
	off          int
	lfns         []byte
}

func (v *Volume) crossingCreate(d *dirContent, start, first, off int) {
	if v.opts.EntryPerWrite {
		return
	}
	v.order.crossings = append(v.order.crossings, crossing{d: d, start: start, first: first, off: off})
}

func (v *Volume) crossingRemove(d *dirContent, start, first, off int) {
	if v.opts.EntryPerWrite {
		return
	}
	// A name created and removed before it was written needs no order of its own, but its
	// create must not mask the slot for what comes there next.
	kept := v.order.crossings[:0]
	for _, c := range v.order.crossings {
		if !(c.d == d && c.off == off && c.lfns == nil) {
			kept = append(kept, c)
		}
	}
	v.order.crossings = append(kept, crossing{d: d, start: start, first: first, off: off, lfns: bytes.Clone(d.buf[start:first])})
}

// state tells whether what the crossing orders is still what its directory holds (apply): the
// created name is still there; the removed one's long-name entries are still deleted (not
// reused). A removal whose entries are shown again for the moment (a rename writing its new entry
// first) waits (keep).
func (c *crossing) state() (apply, keep bool) {
	d := c.d
	if d.n.unlinked {
		return false, false
	}
	if c.lfns == nil {
		s, ok := d.slots[c.off]
		return ok && s.lfnOff == c.start, false
	}
	if bytes.Equal(d.buf[c.start:c.first], c.lfns) {
		return false, true
	}
	for o := c.start; o < c.first; o += ondisk.DirEntrySize {
		if !ondisk.IsDeleted(d.buf[o:]) {
			return false, false
		}
	}
	return true, false
}

// maskCrossings puts into the directories' buffers what the disk is to see before the flush that
// orders the crossing names (creates only, with createsOnly), and returns what puts the truth
// back and marks it dirty again. It keeps the crossings still to be ordered.
func (v *Volume) maskCrossings(createsOnly bool) (restore func(), any bool) {
	type saved struct {
		d    *dirContent
		off  int
		data []byte
	}
	var undo []saved
	kept := v.order.crossings[:0]
	for _, c := range v.order.crossings {
		if createsOnly && c.lfns != nil {
			kept = append(kept, c)
			continue
		}
		apply, keep := c.state()
		if keep || (createsOnly && apply) {
			kept = append(kept, c)
		}
		if !apply {
			continue
		}
		any = true
		if c.lfns == nil {
			// The name's entries in the short entry's sector read as deleted: the long-name
			// entries before it are then an orphan with its start, which fsck deletes, not a
			// fragment, which fsck.fat would leave.
			end := c.off + ondisk.DirEntrySize
			undo = append(undo, saved{c.d, c.first, bytes.Clone(c.d.buf[c.first:end])})
			for o := c.first; o < end; o += ondisk.DirEntrySize {
				ondisk.MarkDeleted(c.d.buf[o:])
			}
			c.d.markDirty(c.first, end-c.first)
		} else {
			undo = append(undo, saved{c.d, c.start, bytes.Clone(c.d.buf[c.start:c.first])})
			copy(c.d.buf[c.start:c.first], c.lfns)
			c.d.markDirty(c.start, c.first-c.start)
		}
	}
	v.order.crossings = kept
	return func() {
		for _, u := range undo {
			copy(u.d.buf[u.off:], u.data)
			u.d.markDirty(u.off, len(u.data))
		}
	}, any
}
