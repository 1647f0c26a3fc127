package fuzzimage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// Image is a whole test image written to a file: made here (mkfs.fat, mtools and fatlabel, and
// for the broken ones a defect planted into such an image) or rebuilt from one of dosfstools'
// own test images.
type Image struct {
	Name   string // unique: the class, the FAT type for made images, the dump's name for dosfstools'
	Class  string // the dosfstools test image of the same class: check-circular_chain, label-...
	Path   string
	Broken bool // fsck.fat -n exits non-zero on it (it reports some damage, such as a long name's wrong checksum, and exits 0)
}

// Defect is one class of damage planted into a clean image, named as dosfstools' test image of
// the same class, with the words fsck.fat -n prints for it.
type Defect struct {
	Class string
	Words string
	// Plant damages img (a whole, untrimmed image); false when the layout cannot have it.
	Plant func(img []byte, g ondisk.Geometry) bool
}

// seedNames are the short names of seedTree's entries that the defects use.
var (
	nameReadme = shortName("README", "TXT")
	nameLong   = shortName("ALONGF~1", "TEX") // "a long file name.text": two clusters of 512 bytes
	nameEmpty  = shortName("EMPTY", "")
	nameDir    = shortName("DIR", "")
	nameXC     = shortName("X", "C")
)

func shortName(base, ext string) string { return fmt.Sprintf("%-8s%-3s", base, ext) }

// Defects are the classes of damage of dosfstools' broken test images (check-*.fsck) and a few
// more, each planted by hand into the images MkfsSeeds makes.
var Defects = []Defect{
	{"check-bad_names", "Bad short file name", func(img []byte, g ondisk.Geometry) bool {
		e := findEntry(img, g, rootDir(g), nameReadme)
		copy(img[e:], "RE?DME  TXT")
		return true
	}},
	{"check-chain_to_free_cluster", "Contains a free cluster", func(img []byte, g ondisk.Geometry) bool {
		c := startCluster(img, findEntry(img, g, rootDir(g), nameLong))
		if !g.ValidCluster(fatEntry(img, g, c)) {
			return false // one cluster only
		}
		setFAT(img, g, fatEntry(img, g, c), 0)
		return true
	}},
	{"check-chain_to_other_file", "share clusters", func(img []byte, g ondisk.Geometry) bool {
		sub := findEntry(img, g, rootDir(g), nameDir)
		x := findEntry(img, g, g.ClusterOffset(startCluster(img, sub)), nameXC)
		e := findEntry(img, g, rootDir(g), nameReadme)
		setFAT(img, g, startCluster(img, e), 0)
		setStart(img, e, startCluster(img, x))
		return true
	}},
	{"check-chain_too_long", "cluster chain length is > ", func(img []byte, g ondisk.Geometry) bool {
		e := findEntry(img, g, rootDir(g), nameLong)
		if !g.ValidCluster(fatEntry(img, g, startCluster(img, e))) {
			return false
		}
		binary.LittleEndian.PutUint32(img[e+28:], 100)
		return true
	}},
	{"check-circular_chain", "Circular cluster chain", func(img []byte, g ondisk.Geometry) bool {
		c := startCluster(img, findEntry(img, g, rootDir(g), nameLong))
		last := c
		for g.ValidCluster(fatEntry(img, g, last)) {
			last = fatEntry(img, g, last)
		}
		setFAT(img, g, last, c)
		return true
	}},
	{"check-dot_entries", "entry in this slot", func(img []byte, g ondisk.Geometry) bool {
		sub := g.ClusterOffset(startCluster(img, findEntry(img, g, rootDir(g), nameDir)))
		copy(img[sub:], "DOT        ")
		return true
	}},
	{"check-duplicate_names", "Duplicate directory entry", func(img []byte, g ondisk.Geometry) bool {
		copy(img[findEntry(img, g, rootDir(g), nameEmpty):], nameReadme)
		return true
	}},
	{"check-first_cluster", "to be corrupt", func(img []byte, g ondisk.Geometry) bool {
		setFAT(img, g, 0, 0)
		return true
	}},
	{"check-dos_cln_shut", "Dirty bit is set", func(img []byte, g ondisk.Geometry) bool {
		if g.Type == ondisk.FAT12 {
			return false
		}
		off := 37
		if g.Type == ondisk.FAT32 {
			off = 65
		}
		img[off] |= 1
		return true
	}},
	{"check-label-different", "and different", func(img []byte, g ondisk.Geometry) bool {
		copy(img[bootLabel(g):], "OTHER      ")
		return true
	}},
	{"check-label-only-boot", "no volume label in root directory", func(img []byte, g ondisk.Geometry) bool {
		img[findEntry(img, g, rootDir(g), shortName("SEED", ""))] = 0xE5
		return true
	}},
	{"check-label-only-root", "no label in boot sector", func(img []byte, g ondisk.Geometry) bool {
		copy(img[bootLabel(g):], "NO NAME    ")
		return true
	}},
	// Beyond dosfstools' images: lost clusters, a long name whose checksum does not match, a
	// wrong FSINFO free count, FAT copies that differ.
	{"lost_clusters", "unused cluster", func(img []byte, g ondisk.Geometry) bool {
		setFAT(img, g, g.Clusters+1, eoc(g))
		return true
	}},
	{"lfn_checksum", "Checksum in long filename part wrong", func(img []byte, g ondisk.Geometry) bool {
		e := findEntry(img, g, rootDir(g), nameLong)
		img[e-ondisk.DirEntrySize+13]++ // the checksum of the LFN entry just before
		return true
	}},
	{"fsinfo_free_count", "Free cluster summary wrong", func(img []byte, g ondisk.Geometry) bool {
		if g.Type != ondisk.FAT32 || g.FSInfoSector == 0 {
			return false
		}
		off := g.FSInfoSector*int64(g.SectorSize) + 488
		binary.LittleEndian.PutUint32(img[off:], binary.LittleEndian.Uint32(img[off:])-7)
		return true
	}},
}

// PlantedImages writes, for every layout of MkfsSeeds with two FATs or one, the clean image and
// one image per Defect it can have, and checks that fsck.fat -n calls the clean ones clean and
// reports every planted defect in its words. It skips or fails tb
// (testenv) without mkfs.fat, mtools and fsck.fat.
func PlantedImages(tb testing.TB) []Image {
	tb.Helper()
	testenv.RequireTool(tb, "fsck.fat")
	var out []Image
	dir := tb.TempDir()
	for _, s := range MkfsSeeds(tb) {
		img := Untrim(s.Image)
		b, err := ondisk.ParseBootSector(img)
		if err != nil {
			tb.Fatalf("%s: %v", s.Name, err)
		}
		g, err := b.Geometry(int64(len(img)))
		if err != nil {
			tb.Fatalf("%s: %v", s.Name, err)
		}
		clean := filepath.Join(dir, s.Name+".img")
		writeImage(tb, clean, img)
		if code, msg := fsckFat(tb, clean); code != 0 {
			tb.Fatalf("%s: fsck.fat -n does not call the clean image clean (exit %d):\n%s", s.Name, code, msg)
		}
		out = append(out, Image{Name: s.Name, Class: "clean", Path: clean})
		for _, d := range Defects {
			broken := bytes.Clone(img)
			if !d.Plant(broken, g) {
				continue
			}
			name := d.Class + "-" + s.Name
			p := filepath.Join(dir, name+".img")
			writeImage(tb, p, broken)
			code, msg := fsckFat(tb, p)
			if !strings.Contains(msg, d.Words) {
				tb.Fatalf("%s: fsck.fat -n does not report the planted damage %q (exit %d):\n%s", name, d.Words, code, msg)
			}
			out = append(out, Image{Name: name, Class: d.Class, Path: p, Broken: code != 0})
		}
	}
	return out
}

// LabelImages are clean FAT32 images whose label was set or changed as dosfstools' label-*
// images were: mkfs.fat -n, fatlabel, mlabel (with -c to erase it).
func LabelImages(tb testing.TB) []Image {
	tb.Helper()
	testenv.RequireTool(tb, "mkfs.fat", "fatlabel", "mlabel")
	dir := tb.TempDir()
	cases := []struct {
		name  string
		mkfs  []string
		later [][]string // commands, IMG replaced by the image's path
	}{
		{"label-fat32_mkdosfs_none", nil, nil},
		{"label-fat32_mkdosfs_label1", []string{"-n", "LABEL1"}, nil},
		{"label-fat32_mkdosfs_label1_dosfslabel_label2", []string{"-n", "LABEL1"}, [][]string{{"fatlabel", "IMG", "LABEL2"}}},
		{"label-fat32_mkdosfs_label1_dosfslabel_empty", []string{"-n", "LABEL1"}, [][]string{{"fatlabel", "-r", "IMG"}}},
		{"label-fat32_mkdosfs_label1_mlabel_erase", []string{"-n", "LABEL1"}, [][]string{{"mlabel", "-c", "-i", "IMG", "::"}}},
		{"label-fat32_mkdosfs_label1_mlabel_label2", []string{"-n", "LABEL1"}, [][]string{{"mlabel", "-i", "IMG", "::LABEL2"}}},
		{"label-fat32_mkdosfs_none_dosfslabel_label1", nil, [][]string{{"fatlabel", "IMG", "LABEL1"}}},
		{"label-fat32_mkdosfs_none_mlabel_label1", nil, [][]string{{"mlabel", "-i", "IMG", "::LABEL1"}}},
	}
	var out []Image
	for _, c := range cases {
		p := filepath.Join(dir, c.name+".img")
		writeImage(tb, p, nil)
		if err := os.Truncate(p, 34<<20); err != nil {
			tb.Fatal(err)
		}
		run(tb, "mkfs.fat", append(append([]string{"-F", "32", "--invariant"}, c.mkfs...), p)...)
		for _, cmd := range c.later {
			args := make([]string, len(cmd)-1)
			for i, a := range cmd[1:] {
				args[i] = strings.ReplaceAll(a, "IMG", p)
			}
			run(tb, cmd[0], args...)
		}
		out = append(out, Image{Name: c.name, Class: c.name, Path: p})
	}
	return out
}

// DosfstoolsImages rebuilds dosfstools' test images from the xxd dumps in dir (*.xxd clean,
// *.fsck broken); none when dir is "" or holds none. They are an extra to the images made here.
func DosfstoolsImages(tb testing.TB, dir string) []Image {
	tb.Helper()
	if dir == "" {
		return nil
	}
	dumps, _ := filepath.Glob(filepath.Join(dir, "*.xxd"))
	broken, _ := filepath.Glob(filepath.Join(dir, "*.fsck"))
	dumps = append(dumps, broken...)
	if len(dumps) == 0 {
		return nil
	}
	testenv.RequireTool(tb, "xxd")
	out := make([]Image, 0, len(dumps))
	tmp := tb.TempDir()
	for _, dump := range dumps {
		base := filepath.Base(dump)
		ext := filepath.Ext(base)
		p := filepath.Join(tmp, base+".img")
		run(tb, "xxd", "-r", dump, p)
		class := strings.TrimSuffix(base, ext)
		if ext == ".xxd" && strings.HasPrefix(class, "check-") {
			class = "clean" // fsck.fat's repair of the .fsck image of the class
		}
		out = append(out, Image{Name: base, Class: class, Path: p, Broken: ext == ".fsck"})
	}
	return out
}

// AllImages is every image the format tests check: made here always, and dosfstools' own from
// sharedDir (testenv.SharedDir) when they are there.
func AllImages(tb testing.TB, sharedDir string) []Image {
	tb.Helper()
	out := append(PlantedImages(tb), LabelImages(tb)...)
	return append(out, DosfstoolsImages(tb, sharedDir)...)
}

// PlantedSeeds are the damaged images of PlantedImages as fuzz seeds (the clean ones are
// MkfsSeeds), and the first sectors of all of them.
func PlantedSeeds(tb testing.TB) (images []Seed, heads []Seed) {
	tb.Helper()
	for _, im := range PlantedImages(tb) {
		b, err := os.ReadFile(im.Path)
		if err != nil {
			tb.Fatal(err)
		}
		heads = append(heads, Seed{Name: im.Name, Image: b[:min(len(b), 4096)]})
		if b = Trim(b); len(b) <= MaxSeedBytes && im.Class != "clean" {
			images = append(images, Seed{Name: im.Name, Image: b})
		}
	}
	return images, heads
}

// Untrim restores a trimmed seed to its whole volume, as NewDevice does.
func Untrim(b []byte) []byte {
	n := DeclaredSize(b)
	if n <= int64(len(b)) || n > MaxDeviceSize {
		return bytes.Clone(b)
	}
	out := make([]byte, n)
	copy(out, b)
	return out
}

func writeImage(tb testing.TB, p string, b []byte) {
	tb.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

func fsckFat(tb testing.TB, img string) (int, string) {
	tb.Helper()
	cmd := exec.Command("fsck.fat", "-n", img)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if x, ok := err.(*exec.ExitError); ok {
			return x.ExitCode(), string(out)
		}
		tb.Fatalf("fsck.fat -n %s: %v", img, err)
	}
	return 0, string(out)
}

func rootDir(g ondisk.Geometry) int64 {
	if g.Type == ondisk.FAT32 {
		return g.ClusterOffset(g.RootCluster)
	}
	return g.RootDirSector * int64(g.SectorSize)
}

func bootLabel(g ondisk.Geometry) int {
	if g.Type == ondisk.FAT32 {
		return 71
	}
	return 43
}

// findEntry is the offset of the short entry named name11 in the directory at off, within its
// first cluster (or fixed root directory); it panics when there is none, as the seeds have them.
func findEntry(img []byte, g ondisk.Geometry, off int64, name11 string) int64 {
	n := int64(g.ClusterSize)
	if g.Type != ondisk.FAT32 && off == rootDir(g) {
		n = int64(g.RootEntries) * ondisk.DirEntrySize
	}
	for e := off; e < off+n; e += ondisk.DirEntrySize {
		if img[e] == 0 {
			break
		}
		if img[e+11] != 0x0F && string(img[e:e+11]) == name11 {
			return e
		}
	}
	panic(fmt.Sprintf("fuzzimage: no entry %q in the directory at %d", name11, off))
}

func startCluster(img []byte, e int64) uint32 {
	le := binary.LittleEndian
	return uint32(le.Uint16(img[e+20:]))<<16 | uint32(le.Uint16(img[e+26:]))
}

func setStart(img []byte, e int64, c uint32) {
	le := binary.LittleEndian
	le.PutUint16(img[e+20:], uint16(c>>16))
	le.PutUint16(img[e+26:], uint16(c))
}

func eoc(g ondisk.Geometry) uint32 {
	switch g.Type {
	case ondisk.FAT12:
		return 0xFFF
	case ondisk.FAT16:
		return 0xFFFF
	}
	return 0x0FFFFFFF
}

// fatEntry reads FAT entry c of the first FAT.
func fatEntry(img []byte, g ondisk.Geometry, c uint32) uint32 {
	fat := img[g.FATOffset(0):]
	le := binary.LittleEndian
	switch g.Type {
	case ondisk.FAT12:
		v := uint32(le.Uint16(fat[c+c/2:]))
		if c&1 == 1 {
			return v >> 4
		}
		return v & 0xFFF
	case ondisk.FAT16:
		return uint32(le.Uint16(fat[2*c:]))
	}
	return le.Uint32(fat[4*c:]) & 0x0FFFFFFF
}

// setFAT writes FAT entry c in every FAT copy.
func setFAT(img []byte, g ondisk.Geometry, c, v uint32) {
	le := binary.LittleEndian
	for n := 0; n < g.NumFATs; n++ {
		fat := img[g.FATOffset(n):]
		switch g.Type {
		case ondisk.FAT12:
			p := fat[c+c/2:]
			old := le.Uint16(p)
			if c&1 == 1 {
				le.PutUint16(p, old&0x000F|uint16(v&0xFFF)<<4)
			} else {
				le.PutUint16(p, old&0xF000|uint16(v&0xFFF))
			}
		case ondisk.FAT16:
			le.PutUint16(fat[2*c:], uint16(v))
		default:
			le.PutUint32(fat[4*c:], le.Uint32(fat[4*c:])&0xF0000000|v&0x0FFFFFFF)
		}
	}
}
