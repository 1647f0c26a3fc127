package mkfs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// referenceDir holds dosfstools' own test images as xxd dumps (see its NOTICE.md).
func referenceDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "..", "shared", "dosfstools-tests")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("dosfstools reference images not available: %v", err)
	}
	return dir
}

// TestDosfstoolsReferenceImages rebuilds dosfstools' mkfs reference images from their xxd dumps
// and formats images of the same size with the options their .mkfs files give mkfs.fat (all with
// --invariant: volume ID 1234abcd, label time 1426325213), then compares the bytes up to the
// comparison limit dosfstools' test-mkfs uses. mkfs-fat32_1_bad_block is left out: it needs a
// bad-block list (-l), and it comes from a later dosfstools that moves the root cluster past bad
// clusters.
func TestDosfstoolsReferenceImages(t *testing.T) {
	needTools(t, "xxd")
	dir := referenceDir(t)
	label := func(s string) mkfs.Options {
		return mkfs.Options{Label: s, VolumeID: 0x1234abcd, VolumeIDSet: true, CreateTime: invariantTime}
	}
	with := func(o mkfs.Options, f func(*mkfs.Options)) mkfs.Options { f(&o); return o }
	cases := []struct {
		name     string
		blocks   int64 // 1 KiB blocks, mkfs.fat -C's size argument
		opts     mkfs.Options
		cmpLimit int64 // 0 = whole reference
	}{
		{"referenceFAT12", 1440, label("TESTFAT12"), 0},                                                                                           // -n TESTFAT12
		{"referenceFAT16", 256000, label("TESTFAT16"), 1 << 20},                                                                                   // -n TESTFAT16
		{"referenceFAT32", 1024000, label("TESTFAT32"), 10 << 20},                                                                                 // -n TESTFAT32
		{"referenceFAT32mbr", 1024000, with(label("TESTFAT32"), func(o *mkfs.Options) { o.MBR = true }), 10 << 20},                                // --mbr
		{"mkfs-fat32_2_res_sects", 1024000, with(label("TESTFAT32"), func(o *mkfs.Options) { o.NoAlign, o.ReservedSectors = true, 2 }), 10 << 20}, // -a -R 2
		{"mkfs-fat32_4K", 614400, with(label("TEST4K"), func(o *mkfs.Options) { o.SectorSize = 4096 }), 10 << 20},                                 // -S 4096
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			refImg := filepath.Join(tmp, "ref.img")
			if out, err := exec.Command("xxd", "-r", filepath.Join(dir, c.name+".xxd"), refImg).CombinedOutput(); err != nil {
				t.Fatalf("xxd -r: %v\n%s", err, out)
			}
			ref, err := os.ReadFile(refImg)
			if err != nil {
				t.Fatal(err)
			}
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
