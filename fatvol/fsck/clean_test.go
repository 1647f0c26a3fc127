package fsck

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// fillTree lays out a host tree for mcopy: files of sizes around the cluster size (0 bytes
// too), long and Unicode names, a deep directory chain and a directory spanning several
// clusters.
func fillTree(t *testing.T, clusterSize int) string {
	dir := t.TempDir()
	sizes := []int{0, 1, 511, 512, clusterSize - 1, clusterSize, clusterSize + 1, 3*clusterSize + 17, 100_000}
	for _, n := range sizes {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("F%d.BIN", n)), n)
	}
	writeFile(t, filepath.Join(dir, "A rather long file name, with spaces and commas.txt"), 1234)
	writeFile(t, filepath.Join(dir, "héllo wörld ünïcödé.txt"), 77)
	writeFile(t, filepath.Join(dir, "日本語のファイル名.dat"), 4096)
	writeFile(t, filepath.Join(dir, "lower.txt"), 5)
	deep := dir
	for i := 0; i < 12; i++ {
		deep = filepath.Join(deep, fmt.Sprintf("level %02d directory", i))
	}
	writeFile(t, filepath.Join(deep, "bottom.txt"), 42)
	for i := 0; i < 150; i++ {
		writeFile(t, filepath.Join(dir, "many", fmt.Sprintf("entry number %03d with a long name.txt", i)), i)
	}
	writeFile(t, filepath.Join(dir, "empty dir", ".keep"), 0)
	return dir
}

func TestCleanImagesFromMkfsAndMtools(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy")
	cases := []struct {
		name        string
		size        int64
		clusterSize int
		opts        []string
	}{
		{"FAT12 2MiB 512", 2 << 20, 512, []string{"-F", "12", "-s", "1"}},
		{"FAT12 8MiB 2K", 8 << 20, 2048, []string{"-F", "12", "-s", "4"}},
		{"FAT16 32MiB 512", 32 << 20, 512, []string{"-F", "16", "-s", "1"}},
		{"FAT16 128MiB 4K", 128 << 20, 4096, []string{"-F", "16", "-s", "8"}},
		{"FAT16 1FAT 64MiB 2K", 64 << 20, 2048, []string{"-F", "16", "-s", "4", "-f", "1"}},
		{"FAT32 300MiB 512", 300 << 20, 512, []string{"-F", "32", "-s", "1"}},
		{"FAT32 1GiB 4K", 1 << 30, 4096, []string{"-F", "32", "-s", "8"}},
		{"FAT32 4GiB 32K", 4 << 30, 32768, []string{"-F", "32", "-s", "64"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			img := mkfsImage(t, tc.size, tc.opts...)
			check := func(stage string) {
				ref := runFsckFat(t, img)
				if !ref.clean() {
					t.Fatalf("%s: fsck.fat -n says unclean (exit %d):\n%s", stage, ref.code, ref.out)
				}
				rep, err := checkImage(t, img)
				if err != nil {
					t.Fatalf("%s: Check: %v", stage, err)
				}
				if !rep.Clean() {
					t.Fatalf("%s: Check says unclean:\n%s", stage, listProblems(rep))
				}
				for _, p := range rep.Problems {
					// mkfs.fat leaves the FSINFO free count known; nothing else is expected.
					t.Errorf("%s: unexpected warning: %s", stage, p)
				}
				sameSummary(t, rep, ref)
			}
			check("empty")
			mcopyTree(t, img, fillTree(t, tc.clusterSize))
			check("filled")
			rep, _ := checkImage(t, img)
			if rep.Dirs < 14 || rep.Files < 160 {
				t.Errorf("walk found only %d files and %d directories", rep.Files, rep.Dirs)
			}
		})
	}
}

// TestLargeFreshFAT32IsFast checks a freshly made 64 GiB FAT32 volume (sparse) within a time
// budget: the FAT is read once and nothing is read per free cluster.
func TestLargeFreshFAT32IsFast(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	img := mkfsImage(t, 64<<30, "-F", "32")
	rep, err := checkImage(t, img)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("unclean:\n%s", listProblems(rep))
	}
	sameSummary(t, rep, runFsckFat(t, img))
	if testing.Short() {
		return
	}
	res := testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := checkImage(t, img); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A few seconds is the bound asked for; the race detector slows it several times.
	if per := res.NsPerOp(); per > 3e9 {
		t.Errorf("a check of a fresh 64 GiB FAT32 volume took %.2fs", float64(per)/1e9)
	} else {
		t.Logf("fresh 64 GiB FAT32: %s per check", strings.TrimSpace(fmt.Sprintf("%.3fs", float64(per)/1e9)))
	}
}
