package fatvol

import (
	"io/fs"
	"iter"
	"os"
	"path"
	"slices"
	"sort"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// The volume is an io/fs file system for reading.
var (
	_ fs.FS          = (*Volume)(nil)
	_ fs.ReadDirFS   = (*Volume)(nil)
	_ fs.StatFS      = (*Volume)(nil)
	_ fs.ReadDirFile = (*File)(nil)
)

// Open opens name for reading, as fs.FS.
func (v *Volume) Open(name string) (fs.File, error) {
	f, err := v.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Stat describes name, as fs.StatFS.
func (v *Volume) Stat(name string) (fs.FileInfo, error) {
	v.mu.Lock()
	defer v.endOp()
	if err := v.usable(); err != nil {
		return nil, pathErr("stat", name, err)
	}
	n, err := v.resolve(name)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return n.info(name), nil
}

// ReadDir lists a directory sorted by name, as fs.ReadDirFS.
func (v *Volume) ReadDir(name string) ([]fs.DirEntry, error) {
	v.mu.Lock()
	defer v.endOp()
	if err := v.usable(); err != nil {
		return nil, pathErr("readdir", name, err)
	}
	n, err := v.resolve(name)
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	d, err := n.loadDir()
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	var out []fs.DirEntry
	for off := range d.offsetsFrom(0) {
		out = append(out, dirEntry{d.entryInfo(off)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// offsetsFrom yields the offsets of the directory's entries at or after from, in directory order.
func (d *dirContent) offsetsFrom(from int) iter.Seq[int] {
	offs := make([]int, 0, len(d.slots))
	for o, s := range d.slots {
		if o >= from && s.name != "" {
			offs = append(offs, o)
		}
	}
	slices.Sort(offs)
	return slices.Values(offs)
}

// entryInfo describes the entry at off, from the loaded node when there is one (it may hold a
// newer size than the raw entry).
func (d *dirContent) entryInfo(off int) *FileInfo {
	if c, ok := d.children[off]; ok {
		return c.info(c.name)
	}
	e := d.entry(off)
	return d.n.vol.newInfo(d.slots[off].name, e, d.devOffset(off))
}

// info describes the node; name is the path it was reached by.
func (n *node) info(name string) *FileInfo {
	base := path.Base(name)
	if !n.isRoot() {
		base = n.name
	}
	fi := n.vol.newInfo(base, n.ent, n.pos())
	switch {
	case n.isRoot() && n.vol.geo.Type != ondisk.FAT32:
		fi.Attr.Allocated = n.vol.geo.RootDirSectors * int64(n.vol.geo.SectorSize)
	case n.chainOK:
		fi.Attr.Allocated = int64(n.clusterCount()) * int64(n.vol.geo.ClusterSize)
	}
	return fi
}

func (v *Volume) newInfo(name string, e ondisk.DirEntry, pos int64) *FileInfo {
	cs := int64(v.geo.ClusterSize)
	return &FileInfo{
		name: name,
		Attr: Attr{
			Attributes:   e.Attr,
			ShortName:    e.Name.DisplayName(0, ondisk.ShortNameWinNT, v.opts.CodePage),
			Created:      ondisk.DecodeTime(e.CreateDate, e.CreateTime, e.CreateTenth, v.loc),
			Modified:     ondisk.DecodeTime(e.ModDate, e.ModTime, 0, v.loc),
			Accessed:     ondisk.DecodeTime(e.AccessDate, 0, 0, v.loc),
			FirstCluster: e.Cluster(v.geo.Type),
			Size:         int64(e.Size),
			Allocated:    (int64(e.Size) + cs - 1) / cs * cs,
			Pos:          pos,
		},
	}
}

// Attr is what FAT records of an entry; FileInfo.Sys returns it.
type Attr struct {
	Attributes   uint8 // ondisk.Attr* bits
	ShortName    string
	Created      time.Time
	Modified     time.Time
	Accessed     time.Time // a date: FAT keeps no access time of day
	FirstCluster uint32
	Size         int64
	// Allocated is the bytes of the cluster chain: exact for directories and for files the
	// engine has open or has read, else what the size needs (more only after fallocate).
	Allocated int64
	// Pos is where the entry lives on the device (0 for the root): stable for the entry's life,
	// like the kernel's i_pos.
	Pos int64
}

// FileInfo describes an entry, as fs.FileInfo.
type FileInfo struct {
	name string
	Attr Attr
}

func (fi *FileInfo) Name() string { return fi.name }
func (fi *FileInfo) Size() int64 {
	if fi.IsDir() {
		return 0
	}
	return fi.Attr.Size
}
func (fi *FileInfo) IsDir() bool        { return fi.Attr.Attributes&ondisk.AttrDirectory != 0 }
func (fi *FileInfo) ModTime() time.Time { return fi.Attr.Modified }
func (fi *FileInfo) Sys() any           { return &fi.Attr }

// Mode follows Linux vfat with no umask: directories 0755, files 0644, the read-only attribute
// clearing a file's write bits.
func (fi *FileInfo) Mode() fs.FileMode {
	if fi.IsDir() {
		return fs.ModeDir | 0o755
	}
	if fi.Attr.Attributes&ondisk.AttrReadOnly != 0 {
		return 0o444
	}
	return 0o644
}

// dirEntry adapts FileInfo to fs.DirEntry.
type dirEntry struct{ fi *FileInfo }

func (e dirEntry) Name() string               { return e.fi.Name() }
func (e dirEntry) IsDir() bool                { return e.fi.IsDir() }
func (e dirEntry) Type() fs.FileMode          { return e.fi.Mode().Type() }
func (e dirEntry) Info() (fs.FileInfo, error) { return e.fi, nil }
func (e dirEntry) String() string             { return fs.FormatDirEntry(e) }
