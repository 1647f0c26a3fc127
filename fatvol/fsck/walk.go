package fsck

import (
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// path renders the path of file i from the root.
func (c *checker) path(i int32) string {
	if i <= 0 {
		return "/"
	}
	var parts []string
	n := 0
	for j := i; j > 0 && n < maxPathLen; j = c.recs.at(j).parent {
		name := c.recs.name(c.recs.at(j))
		parts = append(parts, name)
		n += len(name) + 1
	}
	var b strings.Builder
	if n >= maxPathLen {
		b.WriteString("/...")
	}
	for k := len(parts) - 1; k >= 0; k-- {
		b.WriteByte('/')
		b.WriteString(parts[k])
	}
	return b.String()
}

func (c *checker) childPath(dir int32, name string) string {
	p := c.path(dir)
	if p == "/" {
		return "/" + name
	}
	return p + "/" + name
}

// walk visits every directory depth first in the order fsck.fat does (a directory's entries
// are all checked and their chains claimed before its subdirectories are entered), with an
// explicit stack so that deep trees cannot exhaust the goroutine stack. Each cluster is owned
// by at most one file, so a directory that loops back to an ancestor is cut where it meets
// the ancestor's clusters, and the walk ends.
func (c *checker) walk() error {
	root := fileRec{entryOff: -1, parent: -1, attr: ondisk.AttrDirectory}
	if c.g.Type == ondisk.FAT32 {
		root.start = c.g.RootCluster
	}
	c.recs.add(root, "", nil)
	if c.g.Type == ondisk.FAT32 {
		// fsck.fat treats the FAT32 root as a file of its own: its chain is checked and
		// claimed before its entries are read.
		c.testChain(0)
		c.checkFile(0)
	}
	stack := []int32{0}
	for len(stack) > 0 && !c.stopped {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		first, err := c.scanDir(d)
		if err != nil {
			return err
		}
		for i := c.recs.len() - 1; i >= first; i-- {
			if f := c.recs.at(i); f.isDir() && !f.deleted && f.parent == d {
				stack = append(stack, i)
			}
		}
	}
	return nil
}

// dirClusters lists the clusters of directory d: the chain it owns.
func (c *checker) dirClusters(d int32) []uint32 {
	var out []uint32
	me := uint32(d) + 1
	for cl := c.recs.at(d).start; cl >= 2 && cl < uint32(len(c.owner)) && c.owner[cl] == me; cl = c.fat.entries[cl] {
		out = append(out, cl)
		if len(out)*c.g.ClusterSize/ondisk.DirEntrySize >= maxDirEntries {
			break
		}
	}
	return out
}

// extent is a run of directory bytes on the device.
type extent struct{ off, length int64 }

// dirExtents gives the byte runs that hold directory d, contiguous clusters coalesced.
func (c *checker) dirExtents(d int32) []extent {
	if d == 0 && c.g.Type != ondisk.FAT32 {
		return []extent{{c.g.RootDirSector * int64(c.g.SectorSize), int64(c.g.RootEntries) * ondisk.DirEntrySize}}
	}
	const maxRun = 1 << 20
	cs := int64(c.g.ClusterSize)
	var out []extent
	for _, cl := range c.dirClusters(d) {
		off := c.g.ClusterOffset(cl)
		if n := len(out); n > 0 && out[n-1].off+out[n-1].length == off && out[n-1].length+cs <= maxRun {
			out[n-1].length += cs
		} else {
			out = append(out, extent{off, cs})
		}
	}
	return out
}

// scanDir reads directory d, records its entries, checks them and claims their chains. It
// returns the index of its first new record.
func (c *checker) scanDir(d int32) (int32, error) {
	first := c.recs.len()
	dirPath := c.path(d)
	c.lfn.reset(dirPath)
	index := 0
	var buf []byte
	for _, ext := range c.dirExtents(d) {
		if cap(buf) < int(ext.length) {
			buf = make([]byte, ext.length)
		}
		p := buf[:ext.length]
		if err := c.readAt(p, ext.off); err != nil {
			return first, err
		}
		for o := 0; o+ondisk.DirEntrySize <= len(p); o += ondisk.DirEntrySize {
			raw := p[o : o+ondisk.DirEntrySize]
			off := ext.off + int64(o)
			if d != 0 && index < 2 {
				c.checkDot(d, index == 1, raw, off)
			} else {
				c.addEntry(d, raw, off)
			}
			index++
			if c.stopped {
				return first, nil
			}
		}
	}
	if index >= maxDirEntries {
		c.problem(Limit, Error, dirPath, 0, -1, "directory has more than %d entries; the rest was not checked", maxDirEntries)
	}
	c.lfnOrphanCheck()
	last := c.recs.len()
	c.checkNames(d, first, last)
	for i := first; i < last; i++ {
		c.checkFile(i)
	}
	return first, nil
}

// addEntry handles one entry of a directory (after the dot entries) as fsck.fat's add_file.
func (c *checker) addEntry(d int32, raw []byte, off int64) {
	if raw[0] == 0 || raw[0] == 0xE5 {
		// Free. fsck.fat and Linux read on past an end marker (0x00) too.
		if d == 0 && raw[0] == 0 {
			c.rootEndSeen = true
		}
		c.lfnOrphanCheck()
		return
	}
	if raw[11] == ondisk.AttrLongName {
		c.lfnAddSlot(raw, off)
		return
	}
	if c.recs.len() >= maxRecords {
		c.problem(Limit, Error, c.path(d), 0, off, "more than %d directory entries on the volume; checking stopped", maxRecords)
		c.stopped = true
		return
	}
	e := ondisk.DecodeDirEntry(raw)
	rec := fileRec{
		short: e.Name, entryOff: off, parent: d, start: e.Cluster(c.g.Type),
		size: e.Size, attr: e.Attr, ntCase: e.NTCase,
	}
	shortName := displayShortName(e.Name, e.NTCase)
	long, _ := c.lfnGet(e.Name, d, shortName, off)
	name := shortName
	rec.hasLFN = long != ""
	rec.renameNew = e.NTCase&ondisk.RenameNew != 0
	copy(rec.stamps[:7], raw[13:20])
	copy(rec.stamps[7:], raw[22:26])
	if long != "" {
		name = long
	}
	if d == 0 && !c.labelFound && !c.rootEndSeen && e.Attr&ondisk.AttrVolumeID != 0 {
		c.label, c.labelFound, c.labelOff = e.Name, true, off
	}
	if rec.isDir() {
		c.rep.Dirs++
	} else {
		c.rep.Files++
	}
	var lfnOffs []int64
	if rec.hasLFN {
		lfnOffs = c.lfn.lastOffsets
	}
	i := c.recs.add(rec, name, lfnOffs)
	if i < 0 {
		c.problem(Limit, Error, c.path(d), 0, off, "the names of the volume's directory entries take more than %d bytes; checking stopped", int64(maxNameBytes))
		c.stopped = true
		return
	}
	if c.maxMemory > 0 && c.fixedBytes+c.recs.bytes() > c.maxMemory {
		c.problem(Limit, Error, c.path(d), 0, off, "the check may use %d MiB, and the FAT and the first %d directory entries take %d MiB: checking stopped (check the volume where more memory is allowed, e.g. csi-fat fsck)",
			mib(c.maxMemory), c.recs.len(), mib(c.fixedBytes+c.recs.bytes()))
		c.stopped = true
		return
	}
	if e.Attr&ondisk.AttrVolumeID != 0 && d != 0 {
		c.problem(BadEntry, Warning, c.path(i), 0, off, "volume label entry outside the root directory")
	}
	if e.Attr&(ondisk.AttrVolumeID|ondisk.AttrDirectory) == ondisk.AttrVolumeID|ondisk.AttrDirectory {
		c.problem(BadEntry, Warning, c.path(i), 0, off, "entry has both the volume-label and the directory attribute (0x%02x)", e.Attr)
	}
	c.testChain(i)
}

// checkDot checks the '.' (dotdot false) or '..' entry of directory d like fsck.fat's handle_dot.
func (c *checker) checkDot(d int32, dotdot bool, raw []byte, off int64) {
	name, want, slot := ".", ondisk.Dot, "first"
	expect := c.recs.at(d).start
	if dotdot {
		name, want, slot = "..", ondisk.DotDot, "second"
		expect = 0
		if p := c.recs.at(d).parent; p > 0 {
			expect = c.recs.at(p).start
			if expect == c.g.RootCluster && c.g.Type == ondisk.FAT32 {
				expect = 0
			}
		}
	}
	e := ondisk.DecodeDirEntry(raw)
	dirPath := c.path(d)
	if dotdot && e.IsDir() && e.Name == want && e.Cluster(c.g.Type) != expect {
		// Right unless d is one of the two names of a rename, which the walk may not know yet.
		c.dotDots = append(c.dotDots, dotDot{dir: d, off: off, got: e.Cluster(c.g.Type), attr: e.Attr})
	} else if !e.IsDir() || e.Cluster(c.g.Type) != expect || e.Name != want {
		switch {
		case raw[0] == 0 || raw[0] == 0xE5:
			c.problem(DotEntries, Error, dirPath, expect, off, "expected a valid '%s' entry in the %s slot, found a free entry", name, slot)
		case e.Name == want:
			c.problem(DotEntries, Error, dirPath, expect, off, "invalid '%s' entry in the %s slot: cluster %d, attributes 0x%02x (want cluster %d, a directory)",
				name, slot, e.Cluster(c.g.Type), e.Attr, expect)
		default:
			c.problem(DotEntries, Error, c.childPath(d, displayShortName(e.Name, e.NTCase)), expect, off,
				"expected a valid '%s' entry in this slot (the %s of %s)", name, slot, dirPath)
		}
		if e.Name != want {
			return
		}
	}
	if e.NTCase&noShortName != 0 {
		c.problem(DotEntries, Error, dirPath, 0, off, "'%s' entry has the no-8.3-name flag set", name)
	}
}

// checkNames applies fsck.fat's check_dir to the entries [first, last) of directory d: short
// names and duplicates.
func (c *checker) checkNames(d, first, last int32) {
	good, bad := 0, 0
	for i := first; i < last; i++ {
		f := c.recs.at(i)
		f.badName = badShortName(f.short, f.ntCase, f.hasLFN)
		if f.badName {
			bad++
		} else {
			good++
		}
	}
	if (d != 0 || c.g.Type == ondisk.FAT32) && good+bad > 4 && bad > good/2 {
		c.problem(BadEntry, Warning, c.path(d), 0, c.recs.at(d).entryOff, "has a large number of bad entries (%d/%d)", bad, good+bad)
	}
	seen := make(map[ondisk.ShortName]int32)
	for i := first; i < last; i++ {
		f := c.recs.at(i)
		if f.attr&ondisk.AttrVolumeID != 0 {
			continue
		}
		if f.badName {
			// fsck.fat renames it, so it takes no part in the duplicate check.
			c.problem(BadEntry, Error, c.path(i), 0, f.entryOff, "bad short file name (%s)", displayShortName(f.short, 0))
			continue
		}
		if j, dup := seen[f.short]; dup {
			c.problem(DuplicateName, Error, c.path(j), 0, f.entryOff, "duplicate directory entry %s: first at offset %d, second at offset %d",
				displayShortName(f.short, 0), c.recs.at(j).entryOff, f.entryOff)
			continue
		}
		seen[f.short] = i
	}
}
