package fatvol_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestFilesCount: Volume.Files counts every file and directory, whether the engine has read
// their directories or not (mcopy made them, so the count does not rest on the engine's own
// writes): the same before and after a directory is read, and right after changes.
func TestFilesCount(t *testing.T) {
	for _, spec := range []volumeSpec{fat12, fat32} {
		t.Run(spec.name, func(t *testing.T) {
			img := makeImage(t, spec)
			src := t.TempDir()
			made := 0
			for i := 0; i < 3; i++ {
				dir := filepath.Join(src, fmt.Sprintf("dir%d", i), "sub")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				made += 2
				for j := 0; j < 20; j++ {
					name := filepath.Join(dir, fmt.Sprintf("a long file name %02d.txt", j))
					if err := os.WriteFile(name, []byte("x"), 0o644); err != nil {
						t.Fatal(err)
					}
					made++
				}
			}
			if err := os.WriteFile(filepath.Join(src, "TOP.TXT"), []byte("top"), 0o644); err != nil {
				t.Fatal(err)
			}
			made++
			mcopyTree(t, img, src)

			v := openVolume(t, img)
			count := func(when string, want int) {
				t.Helper()
				f, err := v.Files()
				if err != nil {
					t.Fatalf("%s: Files: %v", when, err)
				}
				if f.Used != int64(want) || f.Total != f.Used+f.Free || f.Free <= 0 {
					t.Errorf("%s: Files = %+v, want %d used", when, f, want)
				}
			}
			count("nothing read", made)
			if _, err := v.ReadDir("dir1/sub"); err != nil {
				t.Fatal(err)
			}
			count("dir1/sub read", made)
			writeVolumeFile(t, v, "dir1/sub/new.txt", []byte("n"))
			if err := v.Remove("dir2/sub/a long file name 03.txt"); err != nil {
				t.Fatal(err)
			}
			count("one file created, one removed", made)
			if err := v.Mkdir("dir0/sub/more"); err != nil {
				t.Fatal(err)
			}
			count("a directory made", made+1)
			closeVolume(t, v)
			checkClean(t, img)
		})
	}
}
