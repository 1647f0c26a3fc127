package fatvol

import (
	"fmt"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Write ordering. Whatever stops a write-back part way (a crash, a pulled stick), what reached the
// disk must be a consistent volume whose only faults are lost clusters and chains longer than
// their file, and a device may persist the writes issued since its last flush in any order. So
// every write-back goes in phases, with a flush wherever a later phase depends on an earlier one:
//
//  1. file data and the clusters of directories that no entry points at yet;
//  2. the FAT, every copy: new chains, cuts whose entry is durable, quarantined clusters freed;
//     then a flush, and again for the links to new clusters that waited for it (order.go);
//  3. directory entries, once everything they point at is durable;
//  4. FSINFO, which is only a hint.
//
// Clusters an entry let go of stay allocated until that entry is durable (order.go), and a rename
// whose two entries live in different sectors makes the new entry durable before the old one's
// removal is written (ops.go). docs/engine.md lists the rules and what proves them.

// DirtyBytes is the file data written but not yet written back (a batch being written counts no
// more): what a pulled stick would lose now, and what unmount still has to write.
func (v *Volume) DirtyBytes() int64 { return v.cache.dirtyBytes() }

// writeback writes every dirty piece of data and metadata to the device in order, with the flushes
// the order needs but none at the end.
func (v *Volume) writeback() error {
	if err := v.writebackData(); err != nil {
		return err
	}
	if err := v.writebackMeta(false, true); err != nil {
		return err
	}
	v.dirtySince = time.Time{}
	return nil
}

// durable writes everything back and makes it durable, including what waited for it: the cuts and
// the freeing of clusters that waited for their entries.
func (v *Volume) durable() error {
	if err := v.writebackData(); err != nil {
		return err
	}
	if err := v.writebackMeta(true, true); err != nil {
		return err
	}
	v.dirtySince = time.Time{}
	return nil
}

// writebackData writes the dirty file data in [off, off+length) (all of it when length < 0),
// holding the volume lock throughout.
func (v *Volume) writebackData() error { return v.writebackRange(0, -1) }

func (v *Volume) writebackRange(off, length int64) error {
	v.io.Lock()
	defer v.io.Unlock()
	b := v.cache.detach(off, length)
	if b.bytes > 0 {
		v.unflushed = true
	}
	err := v.cache.writeBatch(b, v.opts.MaxRequest)
	v.cache.complete(b, err != nil)
	if err != nil {
		return fmt.Errorf("%s: %w", v.name, err)
	}
	return nil
}

// writebackDataUnlocked writes all dirty file data while letting other operations go on: it is
// called with the volume lock held and returns with it held, but lets go of it while the batch
// is written. Only the end of an operation may call it: what the caller looked at before may
// have changed when it returns.
func (v *Volume) writebackDataUnlocked() error {
	v.io.Lock()
	b := v.cache.detach(0, -1)
	if b.bytes > 0 {
		v.unflushed = true
	}
	v.mu.Unlock()
	err := v.cache.writeBatch(b, v.opts.MaxRequest)
	v.cache.complete(b, err != nil)
	v.io.Unlock()
	v.mu.Lock()
	if err != nil {
		return fmt.Errorf("%s: %w", v.name, err)
	}
	return nil
}

// writebackMeta writes the metadata in the order of the phases above. With sync it also makes it
// durable, and goes on until nothing waits: the cuts and frees the last flush let go.
func (v *Volume) writebackMeta(sync, fsinfo bool) error {
	if err := v.writebackFreshDirs(); err != nil {
		return err
	}
	for {
		if err := v.writebackFAT(); err != nil {
			return err
		}
		// Entries may point at chains and data only once those are durable, and links to new
		// clusters go out only once the clusters' own entries are.
		links := v.holdsWaitOnFAT()
		if !v.unflushed || !(len(v.dirtyDirs) > 0 || links) {
			break
		}
		if err := v.flushDevice(); err != nil {
			return err
		}
		if !links {
			break
		}
	}
	if err := v.writebackDirs(); err != nil {
		return err
	}
	if !sync {
		if fsinfo {
			return v.writeFSInfo()
		}
		return nil
	}
	for {
		// FSINFO goes with the last flush, once no flush lets more clusters go.
		releases := v.releasesAtFlush()
		if fsinfo && !releases {
			if err := v.writeFSInfo(); err != nil {
				return err
			}
		}
		// A flush is due for what was written, and for what waits on phases that wrote
		// nothing (an entry removed long ago, whose clusters go at the last close).
		if !v.unflushed && !releases {
			break
		}
		if err := v.flushDevice(); err != nil {
			return err
		}
		if !v.fat.isDirty() {
			break
		}
		if err := v.writebackFAT(); err != nil {
			return err
		}
	}
	return nil
}

// writebackFAT writes the dirty FAT sectors to every copy in use, as the disk may see them now:
// held entries keep their old value (order.go). Runs of dirty sectors go out as single requests,
// and copy n's run ends where copy n+1's begins when the last sector of one and the first of the
// next are both dirty, so they merge too. With MirrorPerSector (sync mode only) it does what Linux
// did before batching: every sector of every copy its own write, each waited for.
func (v *Volume) writebackFAT() error {
	v.order.fatPhases++
	runs := v.fat.dirtyRuns()
	if len(runs) == 0 {
		return nil
	}
	ss := int64(v.geo.SectorSize)
	restore := v.showDisk()
	held := len(v.order.holds) > 0
	var ranges []devRange
	for _, run := range runs {
		buf := v.fat.raw[run.start*ss : (run.start+run.count)*ss]
		if held {
			buf = append([]byte(nil), buf...)
		}
		for copy := 0; copy < v.geo.NumFATs; copy++ {
			if v.geo.ActiveFAT >= 0 && copy != v.geo.ActiveFAT {
				continue
			}
			if v.opts.Sync && v.opts.MirrorPerSector {
				for s := int64(0); s < run.count; s++ {
					ranges = append(ranges, devRange{off: v.geo.FATOffset(copy) + (run.start+s)*ss, length: ss, buf: buf[s*ss : (s+1)*ss]})
				}
				continue
			}
			ranges = append(ranges, devRange{off: v.geo.FATOffset(copy) + run.start*ss, length: int64(len(buf)), buf: buf})
		}
	}
	restore()
	v.unflushed = true
	if v.opts.Sync && v.opts.MirrorPerSector {
		for _, r := range ranges {
			if _, err := v.dev.WriteAt(r.buf, r.off); err != nil {
				return fmt.Errorf("%s: write FAT at %d: %w", v.name, r.off, err)
			}
			if err := v.dev.Flush(); err != nil {
				return fmt.Errorf("%s: flush: %w", v.name, err)
			}
		}
	} else if err := v.writeRanges(ranges); err != nil {
		return err
	}
	v.fat.clearDirty()
	return nil
}

// writebackDirs writes the dirty sectors of every directory.
func (v *Volume) writebackDirs() error {
	v.unmarkRemoved()
	if restore, any := v.maskCrossings(false); any {
		// Names crossing sectors: their long-name entries' sectors (created) or their short
		// entry's (removed) first, durably (crossing.go). What goes is scattered (a sector in
		// two or three, in a directory being filled): rewriting the few sectors between as
		// they are keeps each phase to one request.
		for d := range v.dirtyDirs {
			d.fillDirtyGaps(crossingGapSectors)
		}
		err := v.writeDirRanges()
		restore()
		if err == nil {
			err = v.flushDevice()
		}
		if err != nil {
			return err
		}
		for d := range v.dirtyDirs {
			d.fillDirtyGaps(crossingGapSectors)
		}
	}
	return v.writeDirRanges()
}

// crossingGapSectors is the longest run of clean sectors between dirty ones that the directory
// phases of a writeback with crossing names rewrite rather than split their requests.
const crossingGapSectors = 8

// fillDirtyGaps marks dirty the clean sectors between two dirty ones when there are at most max
// of them: they hold what the disk has, and one request costs less than two.
func (d *dirContent) fillDirtyGaps(max int) {
	last := -1
	for s, dirty := range d.dirty {
		if !dirty {
			continue
		}
		if last >= 0 && s-last-1 <= max {
			for g := last + 1; g < s; g++ {
				d.dirty[g] = true
			}
		}
		last = s
	}
}

// writeDirRanges writes the dirty sectors of every directory as a directory phase.
func (v *Volume) writeDirRanges() error {
	v.order.dirPhases++
	var ranges []devRange
	for d := range v.dirtyDirs {
		ranges = append(ranges, d.dirtyRanges(false)...)
		delete(v.dirtyDirs, d)
	}
	return v.writeRanges(ranges)
}

// writebackFreshDirs writes the dirty sectors of directory clusters that no entry or chain on
// disk points at yet, with the file data: before anything that makes them part of a directory.
func (v *Volume) writebackFreshDirs() error {
	// A created name crossing into a fresh cluster: its short entry goes as deleted for now, and
	// again in the directory phase, in order (crossing.go).
	restore, _ := v.maskCrossings(true)
	var ranges []devRange
	for d := range v.dirtyDirs {
		ranges = append(ranges, d.dirtyRanges(true)...)
	}
	err := v.writeRanges(ranges)
	restore()
	return err
}

// writeFSInfo brings FAT32's FSINFO sector up to date when its free count or hint changed.
func (v *Volume) writeFSInfo() error {
	if v.geo.Type != ondisk.FAT32 || v.geo.FSInfoSector == 0 {
		return nil
	}
	fi := ondisk.FSInfo{FreeCount: v.fat.free, NextFree: v.fat.next}
	if fi == v.fsinfo {
		return nil
	}
	off := v.geo.FSInfoSector * int64(v.geo.SectorSize)
	if v.fsinfoRaw == nil {
		v.fsinfoRaw = make([]byte, v.geo.SectorSize)
		if _, err := v.dev.ReadAt(v.fsinfoRaw, off); err != nil {
			v.fsinfoRaw = nil
			return fmt.Errorf("%s: read FSINFO: %w", v.name, err)
		}
	}
	fi.Marshal(v.fsinfoRaw)
	v.unflushed = true
	if _, err := v.dev.WriteAt(v.fsinfoRaw, off); err != nil {
		return fmt.Errorf("%s: write FSINFO: %w", v.name, err)
	}
	v.fsinfo = fi
	return nil
}

// flushDevice makes everything written so far durable, and lets go what waited for that.
func (v *Volume) flushDevice() error {
	if err := v.dev.Flush(); err != nil {
		return fmt.Errorf("%s: flush: %w", v.name, err)
	}
	v.unflushed = false
	v.flushed()
	return nil
}

// writeRanges writes ranges sorted by offset, merging adjacent ones into single vectored requests
// of at most MaxRequest bytes.
func (v *Volume) writeRanges(ranges []devRange) error {
	if len(ranges) == 0 {
		return nil
	}
	v.unflushed = true
	sortRuns(ranges)
	for i := 0; i < len(ranges); {
		start := ranges[i].off
		bufs := [][]byte{ranges[i].buf}
		end := start + int64(len(ranges[i].buf))
		j := i + 1
		for j < len(ranges) && ranges[j].off == end && end-start+int64(len(ranges[j].buf)) <= v.opts.MaxRequest {
			bufs = append(bufs, ranges[j].buf)
			end += int64(len(ranges[j].buf))
			j++
		}
		var err error
		if len(bufs) == 1 {
			_, err = v.dev.WriteAt(bufs[0], start)
		} else {
			_, err = v.dev.WritevAt(bufs, start)
		}
		if err != nil {
			return fmt.Errorf("%s: write at %d: %w", v.name, start, err)
		}
		i = j
	}
	return nil
}

// finish ends a mutating operation. In sync mode everything it did is made durable now; with
// EntryPerWrite the metadata goes out now (the stock behaviour benchmarks compare against);
// otherwise it stays in memory for writeback, and only a writer past the dirty bound waits.
func (v *Volume) finish(err error) error {
	var werr error
	switch {
	case v.opts.Sync:
		werr = v.durable()
	case v.opts.EntryPerWrite:
		werr = v.writebackEntryNow()
	default:
		if v.dirtySince.IsZero() {
			v.dirtySince = time.Now()
		}
		werr = v.throttle()
	}
	if err == nil {
		err = werr
	}
	return err
}

// writebackEntryNow writes the FAT and the entries at once, without the flush the order needs
// between them, as the kernel's stock driver does: EntryPerWrite is a baseline for benchmarks.
func (v *Volume) writebackEntryNow() error {
	if err := v.writebackFreshDirs(); err != nil {
		return err
	}
	if err := v.writebackFAT(); err != nil {
		return err
	}
	if err := v.writebackDirs(); err != nil {
		return err
	}
	return v.writeFSInfo()
}

// throttle makes a writer that outruns the device wait, so that dirty pages and the batch in
// flight together stay within the bound (and one request past it): at the bound it waits for the
// batch in flight, which leaves the background writer to take the next while it goes on, or, with
// none in flight, writes back itself; past half of the bound it wakes the background writer.
func (v *Volume) throttle() error {
	dirty, inflight := v.cache.held()
	if dirty+inflight >= v.opts.CacheBytes && inflight > 0 {
		v.mu.Unlock()
		v.io.Lock() // a batch in flight holds io until it is complete
		v.io.Unlock()
		v.mu.Lock()
		dirty, inflight = v.cache.held()
	}
	switch {
	case dirty+inflight >= v.opts.CacheBytes:
		return v.writebackDataUnlocked()
	case v.cache.dirtyBytes() >= v.opts.CacheBytes/2:
		select {
		case v.flusher <- struct{}{}:
		default:
		}
	}
	return nil
}

// backgroundWriter writes back when woken by a writer past half the dirty bound, and everything
// once the oldest dirty data is older than DirtyExpire.
func (v *Volume) backgroundWriter() {
	defer close(v.done)
	tick := time.NewTicker(max(v.opts.DirtyExpire/5, 10*time.Millisecond))
	defer tick.Stop()
	for {
		woken := false
		select {
		case <-v.stop:
			return
		case <-v.flusher:
			woken = true
		case <-tick.C:
		}
		v.mu.Lock()
		// A failed device is not retried: the fence would refuse every write anyway.
		if !v.closed && v.fence.err() == nil {
			var err error
			switch {
			case woken:
				err = v.writebackDataUnlocked()
			case !v.dirtySince.IsZero() && time.Since(v.dirtySince) >= v.opts.DirtyExpire:
				err = v.writeback()
			}
			if err != nil {
				v.opts.Logger.Error("fatvol: background writeback failed", "device", v.name, "err", err)
			}
		}
		v.mu.Unlock()
	}
}
