package layout

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestFormatMBR formats images in the MBR layout and lets the tools judge: sfdisk --dump reads one
// partition at 1 MiB to the end with the type for its FAT type and size, blkid reads a dos table
// and a vfat partition, fsck.fat finds it clean on the kernel's partition device, minfo reads the
// partition's start as hidden sectors, and mtools copies a file in and lists it at the offset.
func TestFormatMBR(t *testing.T) {
	testenv.RequireTool(t, "sfdisk", "blkid", "fsck.fat", "minfo", "mcopy", "mdir")
	cases := []struct {
		size    int64
		fatType ondisk.FATType
		typ     string
	}{
		{16 << 20, ondisk.FAT12, "1"},  // FAT12, under 32 MiB
		{24 << 20, ondisk.FAT16, "4"},  // FAT16 under 32 MiB
		{128 << 20, 0, "6"},            // FAT16
		{600 << 20, 0, "c"},            // FAT32
		{64 << 20, ondisk.FAT12, "6"},  // FAT12 above 32 MiB: mkfs.fat --mbr's rule
		{100 << 20, ondisk.FAT32, "c"}, // FAT32 on a small medium
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%dMiB-%v", c.size>>20, c.fatType), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "stick.img")
			dev, err := blockdev.CreateImage(img, c.size)
			if err != nil {
				t.Fatal(err)
			}
			opts := mkfs.Options{FATType: c.fatType, Label: "STICK"}
			if c.fatType == ondisk.FAT32 && c.size < 512<<20 {
				opts.SectorsPerCluster = 1
			}
			g, p, err := Format(dev, MBR, opts)
			dev.Close()
			if err != nil {
				t.Fatal(err)
			}
			sectors := c.size/512 - 2048
			dump := run(t, "sfdisk", "--dump", img)
			want := fmt.Sprintf("%s1 : start=        2048, size=%12d, type=%s\n", img, sectors, c.typ)
			if !strings.Contains(dump, want) || strings.Count(dump, img+"") != 2 {
				t.Errorf("sfdisk --dump:\n%s\nwant the one partition %q", dump, want)
			}
			if p.Number != 1 || p.Start != 1<<20 || p.Size != sectors*512 || fmt.Sprintf("%x", p.MBRType) != c.typ {
				t.Errorf("Format returned %v", p)
			}
			if bk := run(t, "blkid", "-p", "-o", "export", img); !strings.Contains(bk, "PTTYPE=dos") {
				t.Errorf("blkid -p %s:\n%s", img, bk)
			}
			on := fmt.Sprintf("%s@@%d", img, 1<<20)
			if info := run(t, "minfo", "-i", on, "::"); !regexp.MustCompile(`hidden sectors: 2048\b`).MatchString(info) {
				t.Errorf("minfo: hidden sectors are not the partition's start 2048:\n%s", info)
			}
			src := filepath.Join(t.TempDir(), "hello.txt")
			os.WriteFile(src, []byte("hello\n"), 0o644)
			run(t, "mcopy", "-i", on, src, "::/HELLO.TXT")
			if d := run(t, "mdir", "-i", on, "::/"); !strings.Contains(d, "HELLO") || !strings.Contains(d, "STICK") {
				t.Errorf("mdir:\n%s", d)
			}
			l, err := readImage(t, img)
			if err != nil || l.Kind != MBR || len(l.Partitions) != 1 || !l.Partitions[0].IsFATType() {
				t.Fatalf("read back: %v %v", l, err)
			}
			if g.Type == 0 {
				t.Fatal("no FAT type")
			}
			if os.Geteuid() == 0 {
				loop := losetupPartitions(t, img)
				part := partitionNode(t, loop, 1)
				if bk := run(t, "blkid", "-p", "-o", "export", part); !strings.Contains(bk, "TYPE=vfat") ||
					!strings.Contains(bk, "PART_ENTRY_SCHEME=dos") || !strings.Contains(bk, "PART_ENTRY_TYPE=0x"+c.typ) {
					t.Errorf("blkid -p %s:\n%s", part, bk)
				}
				if out, err := exec.Command("fsck.fat", "-n", part).CombinedOutput(); err != nil {
					t.Errorf("fsck.fat -n %s: %v\n%s", part, err, out)
				}
			} else {
				testenv.RequireLoop(t)
			}
		})
	}
}

// TestFormatMBROverTable: formatting in the MBR layout over a GPT disk and over a superfloppy
// leaves only the new table: no GPT, no old boot sector in the first MiB; an earlier MBR's disk
// signature is kept.
func TestFormatMBROverTable(t *testing.T) {
	testenv.RequireTool(t, "sfdisk", "blkid")
	for _, script := range []string{
		"label: gpt\nstart=2048, size=8192, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4\n",
		"label: dos\nlabel-id: 0x12345678\nstart=4096, size=8192, type=83\n",
	} {
		img := sfdiskImage(t, 64<<20, script)
		dev, err := blockdev.Open(img, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Format(dev, MBR, mkfs.Options{}); err != nil {
			t.Fatal(err)
		}
		dev.Close()
		got := sfdiskDump(t, img)
		if got.Label != "dos" || len(got.Partitions) != 1 || got.Partitions[0].Start != 2048 {
			t.Errorf("after formatting over %q: %+v", script, got)
		}
		if strings.Contains(script, "0x12345678") && got.ID != "0x12345678" {
			t.Errorf("disk signature %s, want the old 0x12345678 kept", got.ID)
		}
		if bk := run(t, "blkid", "-p", "-o", "export", img); !strings.Contains(bk, "PTTYPE=dos") || strings.Contains(bk, "gpt") {
			t.Errorf("blkid -p:\n%s", bk)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}
