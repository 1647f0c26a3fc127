package fatvol

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Stats is what statfs reports of a volume.
type Stats struct {
	Type          ondisk.FATType
	ClusterSize   int
	TotalClusters uint32
	FreeClusters  uint32
	UsedClusters  uint32
}

// StatFS reports the volume's size and free space in clusters.
func (v *Volume) StatFS() (Stats, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.usable(); err != nil {
		return Stats{}, err
	}
	return Stats{
		Type:          v.geo.Type,
		ClusterSize:   v.geo.ClusterSize,
		TotalClusters: v.geo.Clusters,
		// Quarantined clusters are free as far as anyone asking is concerned (order.go).
		FreeClusters: v.fat.free + v.order.quarantinedClusters,
		UsedClusters: v.geo.Clusters - v.fat.free - v.order.quarantinedClusters,
	}, nil
}

// entriesPerNewFile is the directory entries one more file is reckoned to take: its short entry
// and one long-name entry, which holds a name of up to 13 characters. Names like "pvc-data.bin"
// fit; longer names take one more entry per 13 characters, so the estimate is an upper bound
// for them and exact for 8.3 names written in upper case, which need only one.
const entriesPerNewFile = 2

// maxCountedEntries bounds the walk that counts used entries, so a huge volume cannot make a
// statfs slow; past it the count is a lower bound.
const maxCountedEntries = 1 << 20

// Files is what statfs reports of a volume's "inodes". FAT has no inode table: the used ones
// are the files and directories on the volume, and the free ones are how many more files fit,
// by directory entries: the free slots of a FAT12/16 fixed root directory plus what the free
// clusters would hold as directory space, at entriesPerNewFile entries per file. Every new
// directory entry needs that space, and an empty file needs nothing else.
type Files struct {
	Total, Free, Used int64
}

// Files counts and estimates the volume's files for statfs. The driver's volume stats and the
// mount's statfs both report it, so df -i and the CSI stats agree.
func (v *Volume) Files() (Files, error) {
	st, err := v.StatFS()
	if err != nil {
		return Files{}, err
	}
	used, inRoot, err := v.countEntries()
	if err != nil {
		return Files{}, err
	}
	free := int64(st.FreeClusters) * int64(st.ClusterSize) / ondisk.DirEntrySize / entriesPerNewFile
	if re := int64(v.geo.RootEntries); re > 0 {
		// Each file in the fixed root has a short entry and usually one long one.
		free += max(re-inRoot*entriesPerNewFile, 0) / entriesPerNewFile
	}
	return Files{Total: used + free, Free: free, Used: used}, nil
}

// countEntries counts the files and directories on the volume (at most maxCountedEntries), and
// those in its root. Directories the engine has read are counted from memory; the others are
// read from the device for the count alone, neither kept nor claimed: a statfs must not make
// the engine hold a directory it has not read for its own use, which would hide damage made
// on the disk since (and a damaged one is counted as far as it reads). Nothing has changed a
// directory the engine has not read, so the device holds its content.
func (v *Volume) countEntries() (all, root int64, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.usable(); err != nil {
		return 0, 0, err
	}
	for range v.root.dir.offsetsFrom(0) {
		root++
	}
	c := entryCounter{v: v, seen: map[uint32]bool{}}
	if err := c.loaded(v.root.dir); err != nil {
		return 0, 0, err
	}
	for len(c.unread) > 0 && c.all < maxCountedEntries {
		first := c.unread[len(c.unread)-1]
		c.unread = c.unread[:len(c.unread)-1]
		if err := c.fromDevice(first); err != nil {
			return 0, 0, err
		}
	}
	return min(c.all, maxCountedEntries), root, nil
}

// entryCounter counts entries; unread holds the first clusters of directories to read from the
// device, seen those already queued (a damaged volume may have loops).
type entryCounter struct {
	v      *Volume
	all    int64
	unread []uint32
	seen   map[uint32]bool
}

// loaded counts the entries of a directory in memory and, below it, of its subdirectories.
func (c *entryCounter) loaded(d *dirContent) error {
	for off := range d.offsetsFrom(0) {
		c.all++
		if c.all >= maxCountedEntries {
			return nil
		}
		if child, ok := d.children[off]; ok && child.dir != nil {
			if err := c.loaded(child.dir); err != nil {
				return err
			}
			continue
		}
		if e := d.entry(off); e.IsDir() {
			c.queue(e.Cluster(c.v.geo.Type))
		}
	}
	return nil
}

func (c *entryCounter) queue(first uint32) {
	if first != 0 && !c.seen[first] {
		c.seen[first] = true
		c.unread = append(c.unread, first)
	}
}

// fromDevice counts the entries of the directory whose chain starts at first, as read from the
// device, and queues its subdirectories. A chain the FAT cannot follow counts as empty; a device
// that cannot be read is an error.
func (c *entryCounter) fromDevice(first uint32) error {
	v := c.v
	ext, err := v.fat.chain(first, max(uint32(maxDirBytes/v.geo.ClusterSize), 1))
	if err != nil {
		return nil
	}
	cs := int64(v.geo.ClusterSize)
	for _, e := range ext {
		buf := make([]byte, int64(e.count)*cs)
		if _, err := v.dev.ReadAt(buf, v.geo.ClusterOffset(e.start)); err != nil {
			return fmt.Errorf("%s: count files: read directory cluster %d: %w", v.name, e.start, err)
		}
		for o := 0; o+ondisk.DirEntrySize <= len(buf); o += ondisk.DirEntrySize {
			p := buf[o : o+ondisk.DirEntrySize]
			if ondisk.IsEnd(p) {
				return nil
			}
			if ondisk.IsDeleted(p) || ondisk.IsLongName(p) {
				continue
			}
			de := ondisk.DecodeDirEntry(p)
			if de.IsVolumeLabel() || de.Name == ondisk.Dot || de.Name == ondisk.DotDot {
				continue
			}
			c.all++
			if c.all >= maxCountedEntries {
				return nil
			}
			if de.IsDir() {
				c.queue(de.Cluster(v.geo.Type))
			}
		}
	}
	return nil
}

// Label returns the volume label: the root directory's label entry, which is what Windows and
// Linux show, else the boot sector's; "" when there is none.
func (v *Volume) Label() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.root.dir; d != nil && d.labelOff >= 0 {
		e := d.entry(d.labelOff)
		return labelString(e.Name[:], v.opts.CodePage)
	}
	if v.boot.BootSig == 0x29 {
		if l := labelString(v.boot.VolumeLabel[:], v.opts.CodePage); l != "NO NAME" {
			return l
		}
	}
	return ""
}

func labelString(b []byte, cp *ondisk.CodePage) string {
	var sb strings.Builder
	for i, c := range b {
		if i == 0 && c == 0x05 {
			c = 0xE5
		}
		sb.WriteRune(cp.Decode(c))
	}
	return strings.TrimRight(sb.String(), " ")
}

// SetLabel sets the volume label in both places it lives: the root directory's label entry (made
// when missing) and the boot sector (and its FAT32 backup). Like mlabel and Windows it stores the
// label upper-cased, with mkfs.fat's rules for what a label may hold; "" removes it.
func (v *Volume) SetLabel(label string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.writable(); err != nil {
		return err
	}
	raw, err := ondisk.EncodeLabel(strings.ToUpper(label))
	if err != nil {
		return fmt.Errorf("%w: %w", syscall.EINVAL, err)
	}
	if raw == ondisk.NoName {
		label = ""
	}
	return v.finish(v.setLabel(label, raw))
}

func (v *Volume) setLabel(label string, raw [11]byte) error {
	d := v.root.dir
	if label == "" {
		if d.labelOff >= 0 {
			ondisk.MarkDeleted(d.buf[d.labelOff:])
			d.markDirty(d.labelOff, ondisk.DirEntrySize)
			d.holeHint = min(d.holeHint, d.labelOff)
			d.labelOff = -1
		}
	} else {
		if d.labelOff < 0 {
			off, err := d.findFree(1)
			if err != nil {
				return err
			}
			if off >= d.end {
				d.end = off + ondisk.DirEntrySize
				if d.end < len(d.buf) && d.buf[d.end] != 0 {
					d.buf[d.end] = 0
					d.markDirty(d.end, 1)
				}
			}
			d.labelOff = off
		}
		e := v.newEntry(ondisk.AttrVolumeID)
		e.CreateDate, e.CreateTime, e.CreateTenth, e.AccessDate = 0, 0, 0, 0
		e.Name = ondisk.ShortName(raw)
		d.putEntry(d.labelOff, &e)
	}
	if v.boot.BootSig != 0x29 {
		return nil
	}
	v.boot.VolumeLabel = raw
	sectors := []int64{0}
	if v.geo.BackupBootSector != 0 {
		sectors = append(sectors, v.geo.BackupBootSector)
	}
	buf := make([]byte, v.geo.SectorSize)
	for _, s := range sectors {
		off := s * int64(v.geo.SectorSize)
		if _, err := v.dev.ReadAt(buf, off); err != nil {
			return fmt.Errorf("%s: read boot sector: %w", v.name, err)
		}
		b, err := ondisk.ParseBootSector(buf)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		b.VolumeLabel = raw
		b.Marshal(buf)
		if _, err := v.dev.WriteAt(buf, off); err != nil {
			return fmt.Errorf("%s: write boot sector: %w", v.name, err)
		}
	}
	return nil
}
