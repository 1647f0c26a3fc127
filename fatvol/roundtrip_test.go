package fatvol_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
)

// roundTripSpecs are the volumes the round trips run on, with the size of their large file.
var roundTripSpecs = []struct {
	spec  volumeSpec
	large int
}{
	{fat12Small, 200 << 10},
	{fat12, 1 << 20},
	{fat16, 20 << 20},
	{fat32, 20 << 20},
	{fat32Big, 20 << 20},
}

// utf16Units is the length of s in UTF-16 code units, what FAT's long names count.
func utf16Units(s string) int { return len(utf16.Encode([]rune(s))) }

// nameOfUnits pads prefix with letters to exactly n UTF-16 units before the extension.
func nameOfUnits(t testing.TB, prefix, ext string, n int) string {
	t.Helper()
	pad := n - utf16Units(prefix) - utf16Units(ext)
	if pad < 0 {
		t.Fatalf("%q%q is already longer than %d units", prefix, ext, n)
	}
	name := prefix + strings.Repeat("x", pad) + ext
	if utf16Units(name) != n {
		t.Fatalf("%q has %d units, want %d", name, utf16Units(name), n)
	}
	return name
}

// manyNames are names of 10 to 60 units in one directory, in creation order, enough of them
// that the directory grows over several clusters.
func manyNames(count int) []string {
	names := make([]string, count)
	for i := range names {
		// Zero-padded so that sorted order is creation order; the tail varies the slot count.
		names[i] = fmt.Sprintf("Entry %04d %s.Txt", i, strings.Repeat("y", (i*7)%47))
	}
	return names
}

// lfnSlots is how many long-name entries a name that needs a long name takes: 13 units each.
func lfnSlots(name string) int { return (utf16Units(name) + 12) / 13 }

// requireBoundaryCrossings checks, from the names alone, that laying them out one after the other
// in a new directory (after '.' and '..') makes some name's entries straddle a sector boundary and
// some straddle a cluster boundary, so the round trip exercises both.
func requireBoundaryCrossings(t testing.TB, names []string, sectorSize, clusterSize int) {
	t.Helper()
	crossSector, crossCluster := 0, 0
	at := 2 * 32
	for _, name := range names {
		end := at + (lfnSlots(name)+1)*32 - 1
		if at/sectorSize != end/sectorSize {
			crossSector++
		}
		if at/clusterSize != end/clusterSize {
			crossCluster++
		}
		at = end + 1
	}
	if crossSector == 0 || crossCluster == 0 {
		t.Fatalf("test setup: %d names cross sector boundaries and %d cross cluster boundaries; want both", crossSector, crossCluster)
	}
	t.Logf("%d long names straddle a sector boundary, %d a cluster boundary", crossSector, crossCluster)
}

// richTree is the content the round trips write: long, Unicode, mixed-case and boundary-length
// names, a 20-level path, files of sizes around the cluster size, one large file, and a directory
// of 500 long names.
func richTree(t testing.TB, cs, large int, withSupplementary bool) (*tree, []string) {
	r := rand.New(rand.NewPCG(1, uint64(cs)))
	tr := newTree()
	small := func(i int) []byte { return randomBytes(r, 1+i%50) }
	names := []string{
		"Grüße.txt",
		"日本語 ファイル.dat",
		"MixedCase.Txt",
		"UPPER.TXT",
		"lower.txt",
		"a",
		"B",
		"ALLCAPSLONGNAME.TEXT",
		"name with  spaces and.many.dots.tar.gz",
		"Ünïcødé ÀÉÎÕÜ ñ ß ø.bin",
		nameOfUnits(t, "thirteen", ".txt", 13),
		nameOfUnits(t, "fourteen", ".txt", 14),
		nameOfUnits(t, "twenty-six units", ".txt", 26),
		nameOfUnits(t, "Ωmega-27 ", ".Bin", 27),
		nameOfUnits(t, "max-", ".end", 255),
	}
	if withSupplementary {
		names = append(names,
			"emoji 😀 party 🎉.txt",
			nameOfUnits(t, "😀", ".txt", 13),
			nameOfUnits(t, "😀😀", ".dat", 26),
		)
	}
	for i, n := range names {
		tr.addFile(n, small(i))
	}
	tr.addFile("Sub Dir/Another Sub/Grüße.txt", small(1))
	tr.addDir("empty dir")
	tr.addDir("Sub Dir/empty Ünïcødé dir")

	deep := ""
	for i := 1; i <= 20; i++ {
		deep += fmt.Sprintf("Level %02d Dir/", i)
	}
	tr.addFile(deep+"deep file.txt", []byte("twenty levels down\n"))

	for _, s := range []struct {
		name string
		size int
	}{{"zero", 0}, {"one", 1}, {"cluster-1", cs - 1}, {"cluster", cs}, {"cluster+1", cs + 1}, {"3 clusters+7", 3*cs + 7}} {
		tr.addFile("sizes/"+s.name, randomBytes(r, s.size))
	}
	tr.addFile("large/large file.bin", randomBytes(r, large))

	many := manyNames(500)
	for i, n := range many {
		var data []byte
		if i%25 == 0 {
			data = small(i)
		}
		tr.addFile("many/"+n, data)
	}
	return tr, many
}

// asMtoolsShows renames the tree's paths the way mtools 4.0 shows long names: it converts each
// UTF-16 unit on its own, so each half of a surrogate pair (a character outside the BMP, stored
// as two units) comes out as '_'. Seeing two '_' per such character is what tells that the
// engine stored the pair.
func asMtoolsShows(tr *tree) *tree {
	show := func(p string) string {
		var b strings.Builder
		for _, r := range p {
			if r > 0xFFFF {
				b.WriteString("__")
			} else {
				b.WriteRune(r)
			}
		}
		return b.String()
	}
	out := newTree()
	for p, data := range tr.files {
		out.addFile(show(p), data)
	}
	for d := range tr.dirs {
		out.addDir(show(d))
	}
	return out
}

// mdirTotals parses mdir -/'s "Total files listed" summary: entries listed (with '.' and '..')
// and their bytes.
func mdirTotals(t testing.TB, out string) (files, bytes int64) {
	t.Helper()
	i := strings.LastIndex(out, "Total files listed:")
	if i < 0 {
		t.Fatalf("mdir printed no total:\n%s", out)
	}
	line := strings.TrimSpace(strings.SplitN(out[i:], "\n", 3)[1])
	// "1 234 files     20 971 520 bytes": mdir groups digits with spaces.
	fi := strings.Index(line, "files")
	bi := strings.Index(line, "bytes")
	if fi < 0 || bi < 0 {
		t.Fatalf("mdir total line %q", line)
	}
	parse := func(s string) int64 {
		n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(s), " ", ""), 10, 64)
		if err != nil {
			t.Fatalf("mdir total line %q: %v", line, err)
		}
		return n
	}
	return parse(line[:fi]), parse(line[fi+len("files") : bi])
}

// TestRoundTripEngineToMtools writes a rich tree with the engine, then reads it back with mtools:
// names and contents must match byte for byte and fsck.fat must find nothing wrong.
func TestRoundTripEngineToMtools(t *testing.T) {
	requireTools(t, "mcopy", "mdir")
	for _, rt := range roundTripSpecs {
		t.Run(rt.spec.name, func(t *testing.T) {
			if testing.Short() && rt.spec.size > 64<<20 {
				t.Skip("large image in -short mode")
			}
			img := makeImage(t, rt.spec)
			v := openVolume(t, img)
			cs := clusterSize(t, v)
			want, many := richTree(t, cs, rt.large, true)
			requireBoundaryCrossings(t, many, v.Geometry().SectorSize, cs)
			want.writeToVolume(t, v)
			closeVolume(t, v)
			checkClean(t, img)

			out := filepath.Join(t.TempDir(), "out")
			mtools(t, img, "mcopy", "-s", "-n", "::/", out)
			got := readTree(t, os.DirFS(out))
			requireSameTree(t, "mcopy of the engine's volume", asMtoolsShows(want), got)

			v = openVolumeWith(t, img, readOnlyOptions)
			requireSameTree(t, "the engine's reading of its own volume", want, readTree(t, v))
			closeVolume(t, v)

			files, size := mdirTotals(t, mtools(t, img, "mdir", "-/", "-a", "::/"))
			var wantSize int64
			for _, d := range want.files {
				wantSize += int64(len(d))
			}
			// mdir lists every file and directory once, plus '.' and '..' in every subdirectory.
			if wantFiles := int64(len(want.files) + 3*len(want.dirs)); files != wantFiles || size != wantSize {
				t.Errorf("mdir -/ lists %d entries of %d bytes, want %d of %d", files, size, wantFiles, wantSize)
			}
		})
	}
}

// TestRoundTripMtoolsToEngine builds a tree on the host, copies it in with mcopy and mmd, and
// reads it back through the engine's io/fs side.
func TestRoundTripMtoolsToEngine(t *testing.T) {
	requireTools(t, "mcopy", "mmd")
	for _, rt := range roundTripSpecs {
		t.Run(rt.spec.name, func(t *testing.T) {
			if testing.Short() && rt.spec.size > 64<<20 {
				t.Skip("large image in -short mode")
			}
			img := makeImage(t, rt.spec)
			v := openVolumeWith(t, img, readOnlyOptions)
			cs := clusterSize(t, v)
			closeVolume(t, v)
			// mtools 4.0 cannot store names outside the BMP, so the host tree has none.
			want, _ := richTree(t, cs, rt.large, false)
			src := t.TempDir()
			want.writeToHost(t, src)
			mcopyTree(t, img, src)
			mtools(t, img, "mmd", "::/made by mmd", "::/made by mmd/Ünïcødé Ordner", "::/MMDUPPER")
			want.addDir("made by mmd/Ünïcødé Ordner")
			want.addDir("MMDUPPER")
			file := filepath.Join(t.TempDir(), "Überraschung – ein langer Name.txt")
			if err := os.WriteFile(file, []byte("copied into an mmd directory\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			mtools(t, img, "mcopy", "-n", file, "::/made by mmd/Ünïcødé Ordner/")
			want.addFile("made by mmd/Ünïcødé Ordner/Überraschung – ein langer Name.txt", []byte("copied into an mmd directory\n"))
			checkClean(t, img)

			v = openVolumeWith(t, img, readOnlyOptions)
			got := readTree(t, v)
			requireSameTree(t, "the engine's reading of mtools' volume", want, got)
			closeVolume(t, v)
		})
	}
}
