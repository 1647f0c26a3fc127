package fatvol

import (
	"math"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// FAT changes that must wait for something else to be durable. Memory always holds the truth;
// what differs is when the disk may see it:
//
//   - a hold keeps the disk's value of one FAT entry until a condition is met: the link from a
//     chain's old end to clusters just added waits until those clusters' own entries are
//     durable (else a cut leaves the chain running into free clusters); the new end of a chain
//     cut short waits until the entry's smaller size is durable (else the size outruns the chain);
//   - quarantined clusters are freed in memory only once the change that let go of them is
//     durable: an entry's removal, or a cut. Until then they stay allocated, so nothing reuses
//     them while the disk may still have an entry pointing at them;
//   - a rename's new entry carries a mark (ondisk.RenameNew) while the disk may still have the
//     old one: the mark is cleared once the old entry's removal is durable.
//
// Conditions count write phases: every writeback of the FAT and of directories is a phase, and
// a flush makes every phase before it durable.

// order is the volume's bookkeeping of phases, holds and quarantine.
type order struct {
	fatPhases, dirPhases    uint64 // phases started
	durableFAT, durableDirs uint64 // phases made durable by the last flush
	holds                   map[uint32]*hold
	quarantine              []quarantined
	quarantinedClusters     uint32
	marks                   map[entryAt]uint64 // marked new entries -> the phase of the old one's removal
	crossings               []crossing         // names crossing sectors whose writes wait to be ordered
}

// entryAt names a short entry by its directory and offset.
type entryAt struct {
	d   *dirContent
	off int
}

// hold is the value the disk keeps for a FAT entry until needFAT and needDirs are durable; then
// the entry's true value goes out, and tail (what a cut let go of) is quarantined until that is
// durable in turn.
type hold struct {
	disk              uint32
	needFAT, needDirs uint64
	tail              []extent
}

type quarantined struct {
	ext               []extent
	needFAT, needDirs uint64
}

func (o *order) met(needFAT, needDirs uint64) bool {
	return o.durableFAT >= needFAT && o.durableDirs >= needDirs
}

// holdLink is called before entry c, the old end of a chain, is pointed at new clusters: the
// disk keeps c as it is until the next FAT phase, which writes the new clusters, is durable.
func (v *Volume) holdLink(c uint32) {
	v.addHold(c, v.order.fatPhases+1, 0, nil)
}

// cut ends a chain at last and lets go of tail: the disk keeps last's link until the entry's new
// size (written in the next directory phase) is durable, and tail stays allocated until the cut
// is durable.
func (v *Volume) cut(last uint32, tail []extent) {
	v.addHold(last, 0, v.order.dirPhases+1, tail)
	v.fat.set(last, entEOC)
	v.order.quarantinedClusters += extentClusters(tail)
}

func (v *Volume) addHold(c uint32, needFAT, needDirs uint64, tail []extent) {
	if v.order.holds == nil {
		v.order.holds = map[uint32]*hold{}
	}
	h := v.order.holds[c]
	if h == nil {
		h = &hold{disk: v.fat.get(c)}
		v.order.holds[c] = h
	}
	h.needFAT, h.needDirs = max(h.needFAT, needFAT), max(h.needDirs, needDirs)
	h.tail = append(h.tail, tail...)
}

// cutPending tells whether a cut at c waits for its entry.
func (v *Volume) cutPending(c uint32) bool {
	h := v.order.holds[c]
	return h != nil && h.needDirs > v.order.durableDirs
}

// quarantine lets go of clusters an entry no longer points at, once that entry's change (written
// in the next directory phase) is durable.
func (v *Volume) quarantine(ext []extent) {
	if len(ext) == 0 {
		return
	}
	v.order.quarantine = append(v.order.quarantine, quarantined{ext: ext, needDirs: v.order.dirPhases + 1})
	v.order.quarantinedClusters += extentClusters(ext)
}

// keepMark records that the entry at off of d carries a rename mark that stays until
// unmarkAfterRemoval says when it may go: an older mark there whose time has come must not
// clear it.
func (v *Volume) keepMark(d *dirContent, off int) {
	if v.order.marks == nil {
		v.order.marks = map[entryAt]uint64{}
	}
	v.order.marks[entryAt{d, off}] = math.MaxUint64
}

// unmarkAfterRemoval clears the rename mark of the entry at off of d at the first directory
// phase after the next one, which writes the old entry's removal, is durable.
func (v *Volume) unmarkAfterRemoval(d *dirContent, off int) {
	v.order.marks[entryAt{d, off}] = v.order.dirPhases + 1
}

// unmark clears the rename mark of the entry at off of d, when it is still there and marked.
func unmark(d *dirContent, off int) {
	if _, ok := d.slots[off]; !ok || d.buf[off+12]&ondisk.RenameNew == 0 {
		return
	}
	d.buf[off+12] &^= ondisk.RenameNew
	d.markDirty(off, ondisk.DirEntrySize)
	if c, ok := d.children[off]; ok {
		c.ent.NTCase &^= ondisk.RenameNew
	}
}

// holdsWaitOnFAT tells whether a hold waits for a FAT phase: a flush after the FAT is written
// lets the links go out.
func (v *Volume) holdsWaitOnFAT() bool {
	for _, h := range v.order.holds {
		if h.needFAT > v.order.durableFAT {
			return true
		}
	}
	return false
}

// releasesAtFlush tells whether a flush now would let a hold or quarantined clusters go.
func (v *Volume) releasesAtFlush() bool {
	o := &v.order
	for _, h := range o.holds {
		if o.fatPhases >= h.needFAT && o.dirPhases >= h.needDirs {
			return true
		}
	}
	for _, q := range o.quarantine {
		if o.fatPhases >= q.needFAT && o.dirPhases >= q.needDirs {
			return true
		}
	}
	return false
}

// flushed records that every phase so far is durable, and lets go what waited for it: held
// entries get their true value written at the next FAT phase, quarantined clusters are freed.
func (v *Volume) flushed() {
	o := &v.order
	o.durableFAT, o.durableDirs = o.fatPhases, o.dirPhases
	for c, h := range o.holds {
		if !o.met(h.needFAT, h.needDirs) {
			continue
		}
		delete(o.holds, c)
		v.fat.markEntryDirty(c)
		if len(h.tail) > 0 {
			// The cut goes out in the next FAT phase; the tail is freed once that is durable.
			o.quarantine = append(o.quarantine, quarantined{ext: h.tail, needFAT: o.fatPhases + 1})
		}
	}
	kept := o.quarantine[:0]
	for _, q := range o.quarantine {
		if !o.met(q.needFAT, q.needDirs) {
			kept = append(kept, q)
			continue
		}
		v.freeQuarantined(q.ext)
	}
	o.quarantine = kept
}

// unmarkRemoved clears the marks whose old entry's removal is durable, for the directory phase
// about to start to write: a mark left a while longer is harmless, and needs no flush of its own.
func (v *Volume) unmarkRemoved() {
	o := &v.order
	for at, need := range o.marks {
		if o.durableDirs >= need {
			delete(o.marks, at)
			unmark(at.d, at.off)
		}
	}
}

// freeQuarantined frees clusters whose entry's change is durable. A hold on one of them goes too,
// and the tail a cut there was to free with it: nothing on disk points at any of it.
func (v *Volume) freeQuarantined(ext []extent) {
	o := &v.order
	for _, e := range ext {
		for c := e.start; c < e.start+e.count && len(o.holds) > 0; c++ {
			if h := o.holds[c]; h != nil {
				delete(o.holds, c)
				if len(h.tail) > 0 {
					v.freeQuarantined(h.tail)
				}
			}
		}
	}
	v.fat.freeChain(ext)
	o.quarantinedClusters -= extentClusters(ext)
}

// showDisk puts the held values into the table for the moment a FAT phase copies it, and
// returns what puts the truth back.
func (v *Volume) showDisk() (restore func()) {
	if len(v.order.holds) == 0 {
		return func() {}
	}
	truth := make(map[uint32]uint32, len(v.order.holds))
	for c, h := range v.order.holds {
		truth[c] = v.fat.get(c)
		v.fat.put(c, h.disk)
	}
	return func() {
		for c, val := range truth {
			v.fat.put(c, val)
		}
	}
}

func extentClusters(ext []extent) uint32 {
	var n uint32
	for _, e := range ext {
		n += e.count
	}
	return n
}
