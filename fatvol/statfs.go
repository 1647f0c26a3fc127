package fatvol

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
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

// countEntries counts the files and directories on the volume, and those in its root.
func (v *Volume) countEntries() (all, root int64, err error) {
	errStop := errors.New("enough")
	err = fs.WalkDir(v, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		all++
		if path.Dir(p) == "." {
			root++
		}
		if all >= maxCountedEntries {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return all, root, err
}

// Label returns the volume label: the root directory's label entry, which is what Windows and
// Linux show, else the boot sector's; "" when there is none.
func (v *Volume) Label() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.root.dir; d != nil && d.labelOff >= 0 {
		e := d.entry(d.labelOff)
		return labelString(e.Name[:])
	}
	if v.boot.BootSig == 0x29 {
		if l := labelString(v.boot.VolumeLabel[:]); l != "NO NAME" {
			return l
		}
	}
	return ""
}

func labelString(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i == 0 && c == 0x05 {
			c = 0xE5
		}
		sb.WriteRune(ondisk.CP437Decode(c))
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
