package fatvol_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/internal/fuzzimage"
	"github.com/csi-fat/csi-fat/internal/judge"
)

// hostileImage is a seed image (mkfs.fat, filled by mtools) being broken by hand.
type hostileImage struct {
	t     *testing.T
	b     []byte
	g     ondisk.Geometry
	attrs map[string]fatvol.Attr // the pristine image's entries by path
	data  map[string][]byte      // and its files' content
}

func newHostileImage(t *testing.T, seed fuzzimage.Seed) *hostileImage {
	dev := fuzzimage.NewDevice(seed.Image)
	h := &hostileImage{t: t, b: dev.Bytes(), attrs: map[string]fatvol.Attr{}, data: map[string][]byte{}}
	v, err := fatvol.Open(fuzzimage.NewDevice(h.b), fatvol.Options{ReadOnly: true, Logger: quietLogger})
	if err != nil {
		t.Fatalf("seed %s: %v", seed.Name, err)
	}
	defer v.Close()
	h.g = v.Geometry()
	err = fs.WalkDir(v, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		fi, _ := d.Info()
		h.attrs[p] = *fi.Sys().(*fatvol.Attr)
		if !d.IsDir() {
			h.data[p], err = fs.ReadFile(v, p)
		}
		return err
	})
	if err != nil {
		t.Fatalf("seed %s: %v", seed.Name, err)
	}
	return h
}

func (h *hostileImage) entry(p string) []byte {
	a, ok := h.attrs[p]
	if !ok {
		h.t.Fatalf("no %s in the seed", p)
	}
	return h.b[a.Pos : a.Pos+ondisk.DirEntrySize]
}

func (h *hostileImage) firstCluster(p string) uint32 { return h.attrs[p].FirstCluster }

// setCluster points the entry of p at cluster c.
func (h *hostileImage) setCluster(p string, c uint32) {
	e := h.entry(p)
	binary.LittleEndian.PutUint16(e[26:], uint16(c))
	if h.g.Type == ondisk.FAT32 {
		binary.LittleEndian.PutUint16(e[20:], uint16(c>>16))
	}
}

// setFAT sets FAT entry c to v in every FAT copy (raw value for the FAT type).
func (h *hostileImage) setFAT(c, v uint32) {
	for n := 0; n < h.g.NumFATs; n++ {
		fat := h.b[h.g.FATOffset(n):]
		switch h.g.Type {
		case ondisk.FAT12:
			o := c + c/2
			if c&1 != 0 {
				fat[o] = fat[o]&0x0F | byte(v<<4)
				fat[o+1] = byte(v >> 4)
			} else {
				fat[o] = byte(v)
				fat[o+1] = fat[o+1]&0xF0 | byte(v>>8)&0x0F
			}
		case ondisk.FAT16:
			binary.LittleEndian.PutUint16(fat[c*2:], uint16(v))
		default:
			binary.LittleEndian.PutUint32(fat[c*4:], v)
		}
	}
}

// dotDot returns the '..' entry of directory p.
func (h *hostileImage) dotDot(p string) []byte {
	off := h.g.ClusterOffset(h.firstCluster(p)) + ondisk.DirEntrySize
	e := h.b[off : off+ondisk.DirEntrySize]
	if string(e[:11]) != "..         " {
		h.t.Fatalf("%s has no '..' second", p)
	}
	return e
}

func (h *hostileImage) eoc() uint32 {
	return map[ondisk.FATType]uint32{ondisk.FAT12: 0xFFF, ondisk.FAT16: 0xFFFF, ondisk.FAT32: 0x0FFFFFFF}[h.g.Type]
}

// Expected outcomes of a hostile image.
const (
	refused   = "refused at open"
	damaged   = "opens damaged: reads only"
	readError = "reads fail where broken, then damaged"
	safeView  = "opens: reads and writes work"
)

// hostileCase breaks a seed image. check, when set, looks at the volume it opened.
type hostileCase struct {
	name   string
	seed   string // seed layout to start from
	want   string
	break_ func(h *hostileImage)
	// bad lists the files whose reads must fail with ErrCorrupt; every other file must read its
	// own content (or, when listed in short, a prefix of it).
	bad   []string
	check func(t *testing.T, h *hostileImage, v *fatvol.Volume)
}

var hostileCases = []hostileCase{
	{name: "FAT too small for the cluster count", seed: "fat16", want: refused, break_: func(h *hostileImage) {
		binary.LittleEndian.PutUint16(h.b[22:], uint16(h.g.FATSectors/2))
	}},
	{name: "zero bytes per sector", seed: "fat16", want: refused, break_: func(h *hostileImage) {
		binary.LittleEndian.PutUint16(h.b[11:], 0)
	}},
	{name: "cluster size not a power of two", seed: "fat12-2k-clusters", want: refused, break_: func(h *hostileImage) { h.b[13] = 3 }},
	{name: "more sectors than the device", seed: "fat16", want: refused, break_: func(h *hostileImage) {
		h.b = h.b[:len(h.b)/2]
	}},
	{name: "chain into the reserved cluster 1", seed: "fat16", want: damaged, bad: []string{"DIR/sub dir/Deep File.bin"}, break_: func(h *hostileImage) {
		h.setFAT(h.firstCluster("DIR/sub dir/Deep File.bin"), 1)
	}},
	{name: "entry starting at the reserved cluster 1", seed: "fat32", want: readError, bad: []string{"README.TXT"}, break_: func(h *hostileImage) {
		h.setCluster("README.TXT", 1)
	}},
	{name: "chain past the end", seed: "fat32", want: damaged, bad: []string{"DIR/sub dir/Deep File.bin"}, break_: func(h *hostileImage) {
		h.setFAT(h.firstCluster("DIR/sub dir/Deep File.bin")+1, h.g.Clusters+10)
	}},
	{name: "cross-linked files: same first cluster", seed: "fat16", want: readError, bad: []string{"a long file name.text"}, break_: func(h *hostileImage) {
		h.setCluster("a long file name.text", h.firstCluster("README.TXT"))
	}},
	{name: "cross-linked files: starts inside another chain", seed: "fat16", want: readError, bad: []string{"DIR/x.c"}, break_: func(h *hostileImage) {
		h.setCluster("DIR/x.c", h.firstCluster("DIR/sub dir/Deep File.bin")+1)
	}},
	{name: "cross-linked files: chains merge", seed: "fat12-64k", want: damaged, bad: []string{"README.TXT", "DIR/sub dir/Deep File.bin"}, break_: func(h *hostileImage) {
		h.setFAT(h.firstCluster("README.TXT"), h.firstCluster("DIR/sub dir/Deep File.bin")+1)
	}},
	{name: "cycle in a file's chain", seed: "fat16", want: damaged, bad: []string{"DIR/sub dir/Deep File.bin"}, break_: func(h *hostileImage) {
		c := h.firstCluster("DIR/sub dir/Deep File.bin")
		h.setFAT(c+2, c)
	}},
	{name: "'..' pointing at a file", seed: "fat16", want: safeView, break_: func(h *hostileImage) {
		binary.LittleEndian.PutUint16(h.dotDot("DIR/sub dir")[26:], uint16(h.firstCluster("README.TXT")))
	}},
	{name: "'..' pointing past the end", seed: "fat32", want: safeView, break_: func(h *hostileImage) {
		binary.LittleEndian.PutUint16(h.dotDot("DIR/sub dir")[26:], 0xFFF0)
	}},
	{name: "'..' pointing at the directory itself", seed: "fat12-64k", want: safeView, break_: func(h *hostileImage) {
		binary.LittleEndian.PutUint16(h.dotDot("DIR/sub dir")[26:], uint16(h.firstCluster("DIR/sub dir")))
	}},
	{name: "directory containing itself", seed: "fat16", want: readError, bad: []string{"DIR/x.c"}, break_: func(h *hostileImage) {
		h.entry("DIR/x.c")[11] = ondisk.AttrDirectory
		h.setCluster("DIR/x.c", h.firstCluster("DIR"))
	}, check: func(t *testing.T, h *hostileImage, v *fatvol.Volume) {
		if _, err := v.ReadDir("DIR/x.c"); !errors.Is(err, fatvol.ErrCorrupt) {
			t.Errorf("listing DIR/x.c, which is DIR again: %v, want ErrCorrupt", err)
		}
	}},
	{name: "two directories sharing clusters", seed: "fat32", want: readError, break_: func(h *hostileImage) {
		h.entry("DIR/x.c")[11] = ondisk.AttrDirectory
		h.setCluster("DIR/x.c", h.firstCluster("DIR/sub dir"))
	}, check: func(t *testing.T, h *hostileImage, v *fatvol.Volume) {
		// The first listed is a directory; the second, the same clusters again, is corrupt.
		if _, err := v.ReadDir("DIR/sub dir"); err != nil {
			t.Errorf("DIR/sub dir: %v", err)
		}
		if _, err := v.ReadDir("DIR/x.c"); !errors.Is(err, fatvol.ErrCorrupt) {
			t.Errorf("listing DIR/x.c, which shares DIR/sub dir's clusters: %v, want ErrCorrupt", err)
		}
	}},
	{name: "short name with '/'", seed: "fat16", want: safeView, break_: func(h *hostileImage) {
		copy(h.entry("README.TXT"), "RE/D    TXT")
	}, check: func(t *testing.T, h *hostileImage, v *fatvol.Volume) {
		if names := rootNames(t, v); slicesContainsAny(names, "/") {
			t.Errorf("root lists %q", names)
		}
	}},
	{name: "long name with '/' and NUL", seed: "fat16", want: safeView, break_: func(h *hostileImage) {
		lfn := h.b[h.attrs["a long file name.text"].Pos-ondisk.DirEntrySize:]
		binary.LittleEndian.PutUint16(lfn[1:], '/') // the first unit of the name's first part
		binary.LittleEndian.PutUint16(lfn[3:], 0)
	}, check: func(t *testing.T, h *hostileImage, v *fatvol.Volume) {
		// FuzzDirIndex/58d5e34c6b6663a9: such a long name is not shown; its short name is.
		names := rootNames(t, v)
		if slicesContainsAny(names, "/\x00") || !slices.Contains(names, h.attrs["a long file name.text"].ShortName) {
			t.Errorf("root lists %q", names)
		}
	}},
	{name: "4 GiB size on a one-cluster chain", seed: "fat16", want: readError, bad: []string{"README.TXT"}, break_: func(h *hostileImage) {
		binary.LittleEndian.PutUint32(h.entry("README.TXT")[28:], 0xFFFFFFFF)
	}},
	{name: "long name entries out of order", seed: "fat32", want: safeView, break_: func(h *hostileImage) {
		pos := h.attrs["a long file name.text"].Pos
		a, b := h.b[pos-64:pos-32], h.b[pos-32:pos]
		tmp := bytes.Clone(a)
		copy(a, b)
		copy(b, tmp)
	}, check: func(t *testing.T, h *hostileImage, v *fatvol.Volume) {
		if _, err := v.Stat("a long file name.text"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the long name of a broken sequence is still shown: %v", err)
		}
	}},
	{name: "long name with a wrong checksum", seed: "fat12-64k", want: safeView, break_: func(h *hostileImage) {
		h.b[h.attrs["a long file name.text"].Pos-ondisk.DirEntrySize+13]++
	}, check: func(t *testing.T, h *hostileImage, v *fatvol.Volume) {
		if _, err := v.Stat("a long file name.text"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a long name with a wrong checksum is still shown: %v", err)
		}
	}},
}

func rootNames(t *testing.T, v *fatvol.Volume) []string {
	entries, err := v.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func slicesContainsAny(names []string, chars string) bool {
	for _, n := range names {
		if strings.ContainsAny(n, chars) || n == "" {
			return true
		}
	}
	return false
}

// TestHostileImages opens hand-broken images: each must be refused at open with a clear error, or
// give a safe view: files read their own content or fail with ErrCorrupt, never another file's;
// once damage is found, changes fail with EROFS. fsck.fat -n must call every image the engine
// found damaged unclean.
func TestHostileImages(t *testing.T) {
	requireTools(t, "fsck.fat")
	seeds := map[string]fuzzimage.Seed{}
	for _, s := range fuzzimage.MkfsSeeds(t) {
		seeds[s.Name] = s
	}
	for _, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostileImage(t, seeds[tc.seed])
			tc.break_(h)
			img := filepath.Join(t.TempDir(), "hostile.img")
			if err := os.WriteFile(img, h.b, 0o644); err != nil {
				t.Fatal(err)
			}
			theirs, err := judge.FsckFat(img)
			if err != nil {
				t.Fatal(err)
			}
			theirs = slices.DeleteFunc(theirs, smallFAT32Warning)
			got := runHostile(t, h, img, tc)
			t.Logf("engine: %s; fsck.fat -n: %d complaints %q", got, len(theirs), firstLines(theirs, 2))
			if got != tc.want {
				t.Errorf("engine: %s, want %s", got, tc.want)
			}
			if got != safeView && len(theirs) == 0 {
				t.Errorf("the engine found damage that fsck.fat -n does not report")
			}
		})
	}
}

// smallFAT32Warning tells whether an fsck.fat line is part of its warning about the seeds' FAT32
// layout with fewer clusters than FAT32 is meant for, which every FAT32 seed gets.
func smallFAT32Warning(line string) bool {
	for _, s := range []string{"Filesystem is FAT32 according to", "but has only", "This may lead to problems"} {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func firstLines(l []string, n int) []string { return l[:min(n, len(l))] }

// runHostile opens the image read-write, reads every file, tries to change the volume, and says
// what happened.
func runHostile(t *testing.T, h *hostileImage, img string, tc hostileCase) string {
	v, err := fatvol.OpenImage(img, fatvol.Options{Logger: quietLogger})
	if err != nil {
		if !errors.Is(err, ondisk.ErrNotFAT) && !strings.Contains(err.Error(), img) {
			t.Errorf("open: %v: neither ErrNotFAT nor naming the image", err)
		}
		t.Logf("open: %v", err)
		return refused
	}
	defer func() {
		if err := v.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	damagedAtOpen := v.Damage() != nil
	if tc.check != nil {
		tc.check(t, h, v)
	}
	for _, p := range append([]string{"README.TXT"}, sortedKeys(h.data)...) {
		want, known := h.data[p]
		if fi, err := v.Stat(p); err == nil && fi.IsDir() {
			continue // made a directory by the case; its check looks at it
		}
		f, err := v.Open(p)
		if err != nil {
			if known && !errors.Is(err, fs.ErrNotExist) {
				requireCorrupt(t, p, err, tc)
			}
			continue
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			requireCorrupt(t, p, err, tc)
		} else if isBad(p, tc) {
			t.Errorf("%s read %d bytes without error; want ErrCorrupt", p, len(got))
		}
		// What a file shows is its own data, as far as it goes; past its own clusters only what
		// its own chain holds, never another file's bytes.
		if n := min(len(got), len(want)); !bytes.Equal(got[:n], want[:n]) {
			t.Errorf("%s: read %q, its content is %q", p, got[:min(n, 40)], want[:min(n, 40)])
		}
	}
	werr := writeNewFile(v, "new file.txt")
	switch {
	case v.Damage() == nil && werr != nil:
		t.Errorf("write on an undamaged volume: %v", werr)
	case v.Damage() != nil && !errors.Is(werr, syscall.EROFS):
		t.Errorf("write on a damaged volume (%v): %v, want EROFS", v.Damage(), werr)
	}
	switch {
	case damagedAtOpen:
		t.Logf("damage: %v", v.Damage())
		return damaged
	case v.Damage() != nil:
		t.Logf("damage: %v", v.Damage())
		return readError
	}
	return safeView
}

func isBad(p string, tc hostileCase) bool {
	for _, b := range tc.bad {
		if b == p {
			return true
		}
	}
	return false
}

func requireCorrupt(t *testing.T, p string, err error, tc hostileCase) {
	t.Helper()
	if !errors.Is(err, fatvol.ErrCorrupt) {
		t.Errorf("%s: %v, want ErrCorrupt", p, err)
	} else if !isBad(p, tc) {
		t.Errorf("%s: %v; it is not broken", p, err)
	}
}

func sortedKeys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
