package fsck

import (
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// inData tells whether cl names a data cluster.
func (c *checker) inData(cl uint32) bool { return cl >= 2 && cl < c.g.Clusters+2 }

// next follows the FAT from cl; it returns 0 at the end of the chain (end mark, free, bad).
func (c *checker) next(cl uint32) uint32 {
	v := c.fat.entries[cl]
	if c.fat.isEOC(v) || c.fat.isBad(v) || !c.inData(v) {
		return 0
	}
	return v
}

// testChain looks for a loop within file i's own chain (fsck.fat's test_file) and cuts it in
// the in-memory FAT. Running into another file's clusters is left to checkFile. Ownership is
// taken for the walk and given back afterwards.
func (c *checker) testChain(i int32) {
	f := c.recs.at(i)
	me := uint32(i) + 1
	var prev uint32
	n := 0
	for walk := f.start; c.inData(walk); {
		if o := c.owner[walk]; o != 0 {
			if o == me && prev != 0 {
				c.problem(ChainCycle, Error, c.path(i), prev, f.entryOff,
					"circular cluster chain: cluster %d links back to cluster %d; the chain holds %d clusters before the loop closes", prev, walk, n)
				c.fat.entries[prev] = c.fat.eoc()
			}
			break
		}
		v := c.fat.entries[walk]
		if c.fat.isBad(v) {
			break
		}
		c.owner[walk] = me
		prev = walk
		n++
		if c.fat.isEOC(v) {
			break
		}
		walk = v
	}
	for walk := f.start; c.inData(walk) && c.owner[walk] == me; walk = c.next(walk) {
		c.owner[walk] = 0
	}
}

// checkFile checks file i's entry and claims its chain, like fsck.fat's check_file; what
// fsck.fat would cut it cuts in the in-memory FAT so that later checks see the repaired chain.
func (c *checker) checkFile(i int32) {
	f := c.recs.at(i)
	if f.deleted {
		return
	}
	isRoot := i == 0
	if f.isDir() && !isRoot {
		if f.size != 0 {
			c.problem(BadEntry, Error, c.path(i), 0, f.entryOff, "directory has non-zero size %d", f.size)
		}
		if f.start == 0 {
			c.problem(BadEntry, Error, c.path(i), 0, f.entryOff, "directory start cluster is 0, which points to the root directory")
			f.deleted = true
			return
		}
		if p := f.parent; p >= 0 && (p > 0 || c.g.Type == ondisk.FAT32) {
			if f.start == c.recs.at(p).start {
				c.problem(BadEntry, Error, c.path(i), f.start, f.entryOff, "directory start cluster %d points to its containing directory", f.start)
				f.deleted = true
				return
			}
			if gp := c.recs.at(p).parent; gp >= 0 {
				g := c.recs.at(gp).start
				if c.g.Type == ondisk.FAT32 && g == c.g.RootCluster {
					g = 0
				}
				if f.start == g {
					c.problem(BadEntry, Error, c.path(i), f.start, f.entryOff, "directory start cluster %d points to its containing directory's parent", f.start)
					f.deleted = true
					return
				}
			}
		}
	}
	if c.inData(f.start) && c.owner[f.start] != 0 && c.renamePair(i, int32(c.owner[f.start]-1)) {
		return
	}
	if f.start == 1 || f.start >= c.g.Clusters+2 {
		c.problem(ClusterOutOfRange, Error, c.path(i), f.start, f.entryOff, "start cluster %d is out of range (2..%d)", f.start, c.g.Clusters+1)
		f.start = 0
	}
	me := uint32(i) + 1
	cs := uint64(c.g.ClusterSize)
	var clusters uint64
	var prev uint32
	for curr := f.start; curr != 0; curr = c.next(curr) {
		v := c.fat.entries[curr]
		if v == 0 || c.fat.isBad(v) {
			what := "free"
			if v != 0 {
				what = "bad"
			}
			c.problem(BrokenChain, Error, c.path(i), curr, f.entryOff, "contains a %s cluster (%d); the chain should end before it", what, curr)
			c.cutAfter(i, prev)
			break
		}
		if !f.isDir() && uint64(f.size) <= clusters*cs {
			c.problem(ChainLength, Error, c.path(i), prev, f.entryOff, "file size is %d bytes, cluster chain length is > %d bytes", f.size, clusters*cs)
			c.cutAfter(i, prev)
			c.freeTail(curr)
			break
		}
		if o := c.owner[curr]; o != 0 {
			first := int32(o - 1)
			c.problem(CrossLink, Error, c.path(i), curr, f.entryOff, "shares cluster %d with %s (the chain of this one is cut after %d bytes)", curr, c.path(first), clusters*cs)
			c.cutAfter(i, prev)
			break
		}
		c.owner[curr] = me
		clusters++
		prev = curr
	}
	if !f.isDir() && uint64(f.size) > clusters*cs {
		c.problem(ChainLength, Error, c.path(i), prev, f.entryOff, "file size is %d bytes, cluster chain length is %d bytes", f.size, clusters*cs)
		// fsck.fat truncates the size to the chain's length.
		f.size = uint32(clusters * cs)
		f.entryChanged = true
	}
}

// cutAfter ends file i's chain after prev (or empties the file when prev is 0) in memory.
func (c *checker) cutAfter(i int32, prev uint32) {
	if prev != 0 {
		c.fat.entries[prev] = c.fat.eoc()
		return
	}
	if i == 0 {
		c.problem(BrokenChain, Error, "/", c.recs.at(0).start, -1, "the FAT32 root directory has no valid first cluster")
	}
	c.recs.at(i).start = 0
	c.recs.at(i).entryChanged = true
}

// freeTail frees, in memory, the unowned clusters from cl on, as fsck.fat's truncate_file
// does, so they are not also reported as lost.
func (c *checker) freeTail(cl uint32) {
	for n := uint32(0); c.inData(cl) && c.owner[cl] == 0 && n < c.g.Clusters; n++ {
		v := c.fat.entries[cl]
		if v == 0 || c.fat.isBad(v) {
			return
		}
		c.fat.entries[cl] = 0
		if c.fat.isEOC(v) {
			return
		}
		cl = v
	}
}

// findLostClusters reports allocated clusters that no file owns (fsck.fat's reclaim_free), one
// problem per lost chain.
func (c *checker) findLostClusters() {
	limit := c.g.Clusters + 2
	pointedTo := make([]uint64, (limit+63)/64)
	var lost uint32
	for cl := uint32(2); cl < limit; cl++ {
		v := c.fat.entries[cl]
		if c.owner[cl] == 0 && v != 0 && !c.fat.isBad(v) {
			lost++
			if c.inData(v) && c.owner[v] == 0 {
				pointedTo[v/64] |= 1 << (v % 64)
			}
		}
	}
	c.rep.LostClusters = lost
	if lost == 0 {
		return
	}
	var inChains uint32
	for cl := uint32(2); cl < limit; cl++ {
		v := c.fat.entries[cl]
		if c.owner[cl] != 0 || v == 0 || c.fat.isBad(v) || pointedTo[cl/64]&(1<<(cl%64)) != 0 {
			continue
		}
		n := uint32(0)
		for walk := cl; c.inData(walk) && c.owner[walk] == 0 && n < lost; walk = c.next(walk) {
			if w := c.fat.entries[walk]; w == 0 || c.fat.isBad(w) {
				break
			}
			n++
		}
		inChains += n
		c.problem(LostClusters, Error, "", cl, -1, "lost chain of %d cluster(s) starting at cluster %d (%d bytes): allocated but not referenced by any file", n, cl, uint64(n)*uint64(c.g.ClusterSize))
	}
	if inChains < lost {
		c.problem(LostClusters, Error, "", 0, -1, "%d lost cluster(s) form cycles with no start", lost-inChains)
	}
}

// checkDirty reports the dirty bit (boot sector state byte bit 0) and, on FAT16/32, a cleared
// clean-shutdown bit in FAT[1], as fsck.fat's check_dirty_bits.
func (c *checker) checkDirty() {
	if c.bs.State&ondisk.StateDirty != 0 {
		c.problem(Dirty, Error, "", 0, -1, "dirty bit is set: the file system was not properly unmounted and some data may be corrupt")
	}
	v1 := c.fat.entries[1]
	switch c.g.Type {
	case ondisk.FAT16:
		if v1&0x8000 == 0 {
			c.problem(Dirty, Error, "", 1, -1, "FAT[1] clean-shutdown bit is clear (0x%04X): the file system was not properly unmounted", v1)
		}
	case ondisk.FAT32:
		if v1&0x08000000 == 0 {
			c.problem(Dirty, Error, "", 1, -1, "FAT[1] clean-shutdown bit is clear (0x%07X): the file system was not properly unmounted", v1)
		}
	}
}

// checkFree counts free clusters and checks them against FSINFO (FAT32).
func (c *checker) checkFree() error {
	var free uint32
	for cl := uint32(2); cl < c.g.Clusters+2; cl++ {
		if c.owner[cl] == 0 && !c.fat.isBad(c.fat.entries[cl]) {
			free++
		}
	}
	c.rep.FreeClusters = free
	c.rep.UsedClusters = c.g.Clusters - free
	if c.g.Type != ondisk.FAT32 {
		return nil
	}
	sector := int64(c.bs.FSInfoSector)
	if sector == 0 {
		c.problem(FSInfo, Warning, "", 0, -1, "no FSINFO sector")
		return nil
	}
	off := sector * int64(c.g.SectorSize)
	if off+512 > c.dev.Size() {
		c.problem(FSInfo, Error, "", 0, -1, "FSINFO sector %d lies beyond the end of the device", sector)
		c.notRepairable()
		return nil
	}
	buf := make([]byte, 512)
	if err := c.readAt(buf, off); err != nil {
		return err
	}
	c.fsinfo, c.fsinfoOff = buf, off
	info, err := ondisk.ParseFSInfo(buf)
	if err != nil {
		c.problem(FSInfo, Error, "", 0, -1, "FSINFO sector %d has bad signatures", sector)
		return nil
	}
	switch {
	case info.FreeCount == ondisk.Unknown:
		c.problem(FSInfo, Warning, "", 0, -1, "free cluster summary uninitialized (should be %d)", free)
	case info.FreeCount != free:
		c.problem(FSInfo, Error, "", 0, -1, "free cluster summary wrong (%d vs. really %d)", info.FreeCount, free)
	}
	if info.NextFree != ondisk.Unknown && !c.inData(info.NextFree) {
		// fsck.fat 4.2 does not look at it; Linux ignores an invalid hint.
		c.problem(FSInfo, Warning, "", info.NextFree, -1, "next-free hint %d is not a data cluster (2..%d)", info.NextFree, c.g.Clusters+1)
	}
	return nil
}

// checkLabel compares the boot sector's label with the root directory's volume label entry, as
// fsck.fat's check_label.
func (c *checker) checkLabel() {
	var boot ondisk.ShortName // fsck.fat's label stays zero without the extended signature
	if c.bs.BootSig == 0x29 {
		boot = c.bs.VolumeLabel
	}
	found, dir := c.labelFound, c.label
	if dir[0] == 0x05 {
		dir[0] = 0xE5
	}
	if !found && boot != noName {
		if labelInvalid(boot) {
			c.problem(Label, Error, "", 0, -1, "label '%s' stored in the boot sector is not valid", prettyLabel(boot))
		} else {
			c.problem(Label, Error, "", 0, -1, "label in the boot sector is '%s', but there is no volume label in the root directory", prettyLabel(boot))
		}
		return
	}
	if !found {
		return
	}
	if labelInvalid(dir) {
		c.problem(Label, Error, "/", 0, c.labelOff, "volume label '%s' stored in the root directory is not valid", prettyLabel(dir))
		return
	}
	switch {
	case boot == noName && dir != noName:
		c.problem(Label, Error, "", 0, -1, "there is no label in the boot sector, but there is volume label '%s' in the root directory", prettyLabel(dir))
	case boot != noName && boot != dir:
		c.problem(Label, Error, "", 0, -1, "volume label '%s' in the root directory and label '%s' in the boot sector differ", prettyLabel(dir), prettyLabel(boot))
	}
}
