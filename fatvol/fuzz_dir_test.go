package fatvol

import (
	"path/filepath"
	"testing"
	"unicode/utf16"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/internal/fuzzimage"
)

// FuzzDirIndex indexes any directory content: long names are joined only from complete,
// well-ordered sequences whose checksum matches their short entry; every listed name is a usable
// path element, and looking it up finds an entry of that name.
func FuzzDirIndex(f *testing.F) {
	for _, s := range fuzzimage.MkfsSeeds(f) {
		if dir := fuzzimage.RootDir(s.Image, 2048); dir != nil {
			f.Add(dir)
		}
	}
	_, heads := fuzzimage.DosfstoolsSeeds(f, filepath.Join("..", "..", "shared", "dosfstools-tests"))
	for _, s := range heads {
		if dir := fuzzimage.RootDir(s.Image, 2048); dir != nil {
			f.Add(dir)
		}
	}
	f.Fuzz(func(t *testing.T, buf []byte) {
		buf = buf[:min(len(buf), maxDirBytes)/ondisk.DirEntrySize*ondisk.DirEntrySize]
		v := &Volume{geo: ondisk.Geometry{Type: ondisk.FAT16, SectorSize: 512}, dirtyDirs: map[*dirContent]struct{}{}}
		d := &dirContent{n: v.newRootNode(), buf: buf}
		d.n.dir = d
		d.index()
		if d.end > len(buf) || d.end%ondisk.DirEntrySize != 0 {
			t.Fatalf("end %d in %d bytes", d.end, len(buf))
		}
		for off, s := range d.slots {
			checkSlot(t, d, off, s)
		}
	})
}

func checkSlot(t *testing.T, d *dirContent, off int, s slot) {
	t.Helper()
	if off%ondisk.DirEntrySize != 0 || s.lfnOff > off || s.lfnOff%ondisk.DirEntrySize != 0 || off >= d.end {
		t.Fatalf("slot at %d: long name at %d, end %d", off, s.lfnOff, d.end)
	}
	e := d.entry(off)
	if s.name == "" {
		if _, ok := d.lookup(e.Name.DisplayName(e.NTCase, 0, nil)); ok && usableName(e.Name.DisplayName(e.NTCase, 0, nil)) {
			t.Fatalf("unlisted entry %q at %d is reachable", e.Name[:], off)
		}
		return
	}
	if !usableName(s.name) {
		t.Fatalf("entry at %d listed as %q", off, s.name)
	}
	// The long-name entries before it must be a sequence n..1 with its checksum.
	count := (off - s.lfnOff) / ondisk.DirEntrySize
	var units []uint16
	for i := 0; i < count; i++ {
		raw := d.buf[s.lfnOff+i*ondisk.DirEntrySize:][:ondisk.DirEntrySize]
		l := ondisk.DecodeLFN(raw)
		if !ondisk.IsLongName(raw) || int(l.Ord) != count-i || l.Last != (i == 0) || l.Checksum != ondisk.LFNChecksum(e.Name) {
			t.Fatalf("entry %q at %d: long-name entry %d of %d is %+v", s.name, off, i, count, l)
		}
	}
	for i := count - 1; i >= 0; i-- {
		l := ondisk.DecodeLFN(d.buf[s.lfnOff+i*ondisk.DirEntrySize:])
		units = append(units, l.LFNUnits()...)
	}
	long, short := string(utf16.Decode(units)), e.Name.DisplayName(e.NTCase, d.n.vol.opts.ShortName, nil)
	switch {
	case count > 0 && usableName(long) && long != s.name:
		t.Fatalf("entry at %d: long name %q listed as %q", off, long, s.name)
	case count > 0 && !usableName(long) && short != s.name:
		t.Fatalf("entry at %d: unusable long name %q listed as %q, not as its short name %q", off, long, s.name, short)
	}
	if found, ok := d.lookup(s.name); ok && ondisk.FoldName(d.slots[found].name) != ondisk.FoldName(s.name) {
		t.Fatalf("%q finds the entry %q", s.name, d.slots[found].name)
	}
}
