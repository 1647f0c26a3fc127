package mkfs_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestFormatWritesMetadataInOneRequest formats a 64 GiB image through a counting device: the
// whole metadata (reserved area, both FATs, root cluster) must go out as one vectored write plus
// one flush, and the image must stay sparse (nothing allocated beyond the metadata).
func TestFormatWritesMetadataInOneRequest(t *testing.T) {
	img := filepath.Join(t.TempDir(), "big.img")
	f, err := blockdev.CreateImage(img, 64*GiB)
	if err != nil {
		t.Fatal(err)
	}
	dev := blockdev.NewCounting(f)
	g, err := mkfs.Format(dev, mkfs.Options{})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	st := dev.Stats()
	metadata := g.FirstDataSector*int64(g.SectorSize) + int64(g.ClusterSize)
	if st.Writes != 1 || st.Flushes != 1 || st.BytesWritten != metadata {
		t.Errorf("Format made %d writes of %d bytes and %d flushes; want 1 write of the %d metadata bytes and 1 flush",
			st.Writes, st.BytesWritten, st.Flushes, metadata)
	}
	var fi syscall.Stat_t
	if err := syscall.Stat(img, &fi); err != nil {
		t.Fatal(err)
	}
	if allocated := fi.Blocks * 512; allocated > metadata+1*MiB {
		t.Errorf("image has %d bytes allocated, want about the %d metadata bytes (sparse data area)", allocated, metadata)
	}
}

// TestFormatOverwritesOldMetadata formats over an image full of 0xFF: every byte of the reserved
// area, the FATs and the root directory must end up as on a fresh mkfs.fat image.
func TestFormatOverwritesOldMetadata(t *testing.T) {
	needTools(t, "mkfs.fat")
	for _, s := range []spec{{size: 64 * MiB, label: "OLD"}, {size: GiB}, {size: 1440 * KiB}} {
		t.Run(s.name(), func(t *testing.T) {
			dir := t.TempDir()
			theirs, ours := filepath.Join(dir, "mkfs.fat.img"), filepath.Join(dir, "ours.img")
			sparseFile(t, theirs, s.size)
			if out, ok := run(t, "mkfs.fat", s.mkfsFatArgs(theirs)...); !ok {
				t.Fatalf("mkfs.fat: %s", out)
			}
			junk := make([]byte, min(s.size, 32*MiB))
			for i := range junk {
				junk[i] = 0xff
			}
			if err := os.WriteFile(ours, junk, 0o600); err != nil {
				t.Fatal(err)
			}
			g, err := formatImage(t, ours, s.size, s.options())
			if err != nil {
				t.Fatal(err)
			}
			compareMetadata(t, ours, theirs, g, nil)
		})
	}
}

// TestPlanMatchesFormat checks that Plan predicts the boot sector Format writes.
func TestPlanMatchesFormat(t *testing.T) {
	for _, s := range []spec{{size: 1440 * KiB}, {size: 64 * MiB, label: "PLAN"}, {size: 2 * GiB, fatType: 32, spc: 16}, {size: 300 * MiB, sectorSize: 4096}} {
		t.Run(s.name(), func(t *testing.T) {
			planned, err := mkfs.Plan(s.size, s.options())
			if err != nil {
				t.Fatal(err)
			}
			img := filepath.Join(t.TempDir(), "p.img")
			if _, err := formatImage(t, img, s.size, s.options()); err != nil {
				t.Fatal(err)
			}
			if d := fieldDiffs(readBootSector(t, img), planned); d != nil {
				t.Errorf("Format wrote a different boot sector than Plan planned:\n  %v", d)
			}
		})
	}
}

// TestSectorSizeAbove4096 documents the one option mkfs.fat accepts and we refuse: logical
// sectors over 4096 bytes, which mkfs.fat itself calls non-standard and Linux cannot mount.
func TestSectorSizeAbove4096(t *testing.T) {
	needTools(t, "mkfs.fat")
	img := filepath.Join(t.TempDir(), "s.img")
	sparseFile(t, img, 64*MiB)
	if out, ok := run(t, "mkfs.fat", "-S", "8192", img); !ok || !strings.Contains(out, "non-standard") {
		t.Logf("mkfs.fat -S 8192 no longer accepts with a warning: %s", out)
	}
	_, err := mkfs.Plan(64*MiB, mkfs.Options{SectorSize: 8192})
	if !errors.Is(err, mkfs.ErrInvalidOption) {
		t.Errorf("Plan with 8192-byte sectors: %v, want ErrInvalidOption", err)
	}
}

// TestFormatUsesDeviceSectorSize formats loop devices with 4096-byte logical blocks: with no
// sector size asked for, Format must use the device's, as mkfs.fat does on the twin device.
func TestFormatUsesDeviceSectorSize(t *testing.T) {
	needTools(t, "mkfs.fat")
	testenv.RequireLoop(t)
	dir := t.TempDir()
	const size = 256 * MiB
	attach := func(img string) string {
		sparseFile(t, img, size)
		out, err := exec.Command("losetup", "-b", "4096", "-f", "--show", img).CombinedOutput()
		if err != nil {
			testenv.Missing(t, "loop devices with 4096-byte blocks: losetup: %v: %s", err, out)
		}
		loop := strings.TrimSpace(string(out))
		t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
		return loop
	}
	theirs, ours := filepath.Join(dir, "mkfs.fat.img"), filepath.Join(dir, "ours.img")
	theirLoop, ourLoop := attach(theirs), attach(ours)
	s := spec{size: size, label: "LOOP4K"}
	if out, ok := run(t, "mkfs.fat", s.mkfsFatArgs(theirLoop)...); !ok {
		t.Fatalf("mkfs.fat: %s", out)
	}
	dev, err := blockdev.Open(ourLoop, false)
	if err != nil {
		t.Fatal(err)
	}
	g, err := mkfs.Format(dev, s.options())
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if g.SectorSize != 4096 {
		t.Errorf("sector size %d on a 4096-byte-block device, want 4096", g.SectorSize)
	}
	if d := fieldDiffs(readBootSector(t, ourLoop), readBootSector(t, theirLoop)); d != nil {
		t.Errorf("boot sector fields differ:\n  %v", d)
	}
	compareMetadata(t, ourLoop, theirLoop, g, nil)
}
