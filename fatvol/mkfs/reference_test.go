package mkfs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestDosfstoolsReferenceImages makes dosfstools' mkfs reference images with mkfs.fat and the
// options their .mkfs files give it (all with --invariant: volume ID 1234abcd, label time
// 1426325213; mkfs.fat 4.2 makes them byte for byte), and rebuilds dosfstools' own from their xxd
// dumps as well when ../shared/dosfstools-tests is there; it formats images of the same size
// with the same options and compares the bytes up to the comparison limit dosfstools' test-mkfs
// uses. mkfs-fat32_1_bad_block is left out: it needs a
// bad-block list (-l), and it comes from a later dosfstools that moves the root cluster past bad
// clusters.
func TestDosfstoolsReferenceImages(t *testing.T) {
	needTools(t, "mkfs.fat")
	dir := testenv.SharedDir(repoRoot(t))
	label := func(s string) mkfs.Options {
		return mkfs.Options{Label: s, VolumeID: 0x1234abcd, VolumeIDSet: true, CreateTime: invariantTime}
	}
	with := func(o mkfs.Options, f func(*mkfs.Options)) mkfs.Options { f(&o); return o }
	cases := []struct {
		name     string
		blocks   int64 // 1 KiB blocks, mkfs.fat -C's size argument
		opts     mkfs.Options
		cmpLimit int64    // 0 = whole reference
		args     []string // mkfs.fat's options besides --invariant
	}{
		{"referenceFAT12", 1440, label("TESTFAT12"), 0, []string{"-n", "TESTFAT12"}},                                                                                                            // -n TESTFAT12
		{"referenceFAT16", 256000, label("TESTFAT16"), 1 << 20, []string{"-n", "TESTFAT16"}},                                                                                                    // -n TESTFAT16
		{"referenceFAT32", 1024000, label("TESTFAT32"), 10 << 20, []string{"-n", "TESTFAT32"}},                                                                                                  // -n TESTFAT32
		{"referenceFAT32mbr", 1024000, with(label("TESTFAT32"), func(o *mkfs.Options) { o.MBR = true }), 10 << 20, []string{"-n", "TESTFAT32", "--mbr"}},                                        // --mbr
		{"mkfs-fat32_2_res_sects", 1024000, with(label("TESTFAT32"), func(o *mkfs.Options) { o.NoAlign, o.ReservedSectors = true, 2 }), 10 << 20, []string{"-n", "TESTFAT32", "-a", "-R", "2"}}, // -a -R 2
		{"mkfs-fat32_4K", 614400, with(label("TEST4K"), func(o *mkfs.Options) { o.SectorSize = 4096 }), 10 << 20, []string{"-n", "TEST4K", "-S", "4096"}},                                       // -S 4096
	}
	sources := []string{"mkfs.fat"}
	if dir != "" {
		needTools(t, "xxd")
		sources = append(sources, "dosfstools")
	}
	for _, c := range cases {
		for _, source := range sources {
			t.Run(c.name+"/"+source, func(t *testing.T) {
				t.Parallel()
				tmp := t.TempDir()
				refImg := filepath.Join(tmp, "ref.img")
				var cmd *exec.Cmd
				if source == "dosfstools" {
					cmd = exec.Command("xxd", "-r", filepath.Join(dir, c.name+".xxd"), refImg)
				} else {
					cmd = exec.Command("mkfs.fat", append(append([]string{"--invariant"}, c.args...), "-C", refImg, strconv.FormatInt(c.blocks, 10))...)
				}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s: %v\n%s", cmd, err, out)
				}
				fi, err := os.Stat(refImg)
				if err != nil {
					t.Fatal(err)
				}
				refSize := fi.Size()
				if c.cmpLimit != 0 {
					refSize = min(refSize, c.cmpLimit)
				}
				ref := readRange(t, refImg, 0, refSize)
				ours := filepath.Join(tmp, "ours.img")
				_, err = formatImage(t, ours, c.blocks*1024, c.opts)
				if err != nil {
					t.Fatalf("Format: %v", err)
				}
				refBS, err := ondisk.ParseBootSector(ref)
				if err != nil {
					t.Fatal(err)
				}
				if d := fieldDiffs(readBootSector(t, ours), refBS); d != nil {
					t.Errorf("boot sector fields differ from the reference:\n  %v", d)
				}
				n := int64(len(ref))
				if c.cmpLimit != 0 {
					n = min(n, c.cmpLimit)
				}
				got := readRange(t, ours, 0, n)
				if !bytes.Equal(got, ref[:n]) {
					i := 0
					for got[i] == ref[i] {
						i++
					}
					t.Errorf("differs from the reference first at byte %d (of %d compared): ours %#02x, reference %#02x", i, n, got[i], ref[i])
				}
			})
		}
	}
}
