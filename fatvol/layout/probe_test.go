package layout

import (
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// countingMedium counts the bytes read through it.
type countingMedium struct {
	Medium
	read int64
}

func (c *countingMedium) ReadAt(p []byte, off int64) (int, error) {
	c.read += int64(len(p))
	return c.Medium.ReadAt(p, off)
}

// probeImage probes an image file and requires that it read at most 128 KiB and changed nothing.
func probeImage(t *testing.T, path string) *Report {
	t.Helper()
	before := fileHash(t, path)
	dev, err := blockdev.Open(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	cm := &countingMedium{Medium: dev}
	r, err := Probe(cm)
	if err != nil {
		t.Fatal(err)
	}
	if cm.read > 128<<10 {
		t.Errorf("Probe read %d bytes, more than the signatures need", cm.read)
	}
	if fileHash(t, path) != before {
		t.Fatal("Probe changed the medium")
	}
	return r
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// blkidType is blkid's low-level probe's TYPE of a file or device ("" for none).
func blkidType(t *testing.T, path string) string {
	t.Helper()
	out, _ := exec.Command("blkid", "-p", "-o", "value", "-s", "TYPE", path).Output()
	return strings.TrimSpace(string(out))
}

// TestProbeForeign: media made by Debian's tools are named as blkid names them, with their
// labels, and never taken for FAT; the reason says what they hold.
func TestProbeForeign(t *testing.T) {
	testenv.RequireTool(t, "blkid")
	cases := []struct {
		name, tool string
		size       int64
		make       func(t *testing.T, img string)
		typ, label string
		reason     string
	}{
		{"exfat", "mkfs.exfat", 64 << 20, func(t *testing.T, img string) { run(t, "mkfs.exfat", "-L", "CAMERA", img) }, TypeExFAT, "", "an exFAT file system"},
		{"ntfs", "mkfs.ntfs", 64 << 20, func(t *testing.T, img string) { run(t, "mkfs.ntfs", "-F", "-Q", "-q", "-L", "WIN", img) }, TypeNTFS, "", "an NTFS file system"},
		{"ext2", "mkfs.ext2", 32 << 20, func(t *testing.T, img string) { run(t, "mkfs.ext2", "-q", "-F", "-L", "old", img) }, TypeExt2, "old", `an ext2 file system labelled "old"`},
		{"ext3", "mkfs.ext3", 32 << 20, func(t *testing.T, img string) { run(t, "mkfs.ext3", "-q", "-F", img) }, TypeExt3, "", "an ext3 file system"},
		{"ext4", "mkfs.ext4", 32 << 20, func(t *testing.T, img string) { run(t, "mkfs.ext4", "-q", "-F", "-L", "rootfs", img) }, TypeExt4, "rootfs", `an ext4 file system labelled "rootfs"`},
		{"swap", "mkswap", 16 << 20, func(t *testing.T, img string) { run(t, "mkswap", "-L", "SWP", img) }, TypeSwap, "SWP", `Linux swap labelled "SWP"`},
		{"luks2", "cryptsetup", 32 << 20, func(t *testing.T, img string) { luksFormat(t, img, "luks2", "--label", "SECRET") }, TypeLUKS, "SECRET", `a LUKS encrypted volume labelled "SECRET"`},
		{"luks1", "cryptsetup", 32 << 20, func(t *testing.T, img string) { luksFormat(t, img, "luks1") }, TypeLUKS, "", "a LUKS encrypted volume"},
		{"iso9660", "xorriso", 0, func(t *testing.T, img string) { isoImage(t, img) }, TypeISO, "PHOTOS", `an ISO 9660 file system labelled "PHOTOS"`},
		{"iso9660-hybrid", "xorriso", 0, func(t *testing.T, img string) { isoImage(t, img, "-append_partition", "2", "0xef") },
			TypeISO, "PHOTOS", `an ISO 9660 file system labelled "PHOTOS" with a hybrid MBR partition table`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			testenv.RequireTool(t, c.tool)
			img := filepath.Join(t.TempDir(), c.name+".img")
			if c.size > 0 {
				os.WriteFile(img, nil, 0o600)
				os.Truncate(img, c.size)
			}
			c.make(t, img)
			if got := blkidType(t, img); got != c.typ {
				t.Fatalf("blkid says %q, the test expects %q", got, c.typ)
			}
			r := probeImage(t, img)
			if r.Usable || r.Whole == nil || r.Whole.Type != c.typ || r.Whole.Label != c.label {
				t.Fatalf("Probe: usable %v, whole %+v, reason %q; want %s %q", r.Usable, r.Whole, r.Reason, c.typ, c.label)
			}
			if r.Reason != "it holds "+c.reason || !errors.Is(r.Err(), ErrNotUsable) {
				t.Errorf("reason %q, want %q", r.Reason, "it holds "+c.reason)
			}
			// What the tools open: refused with the same reason.
			dev, err := blockdev.Open(img, true)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			if _, _, err := Open(dev, ""); !errors.Is(err, ErrNoFAT) || !strings.Contains(err.Error(), c.reason) {
				t.Errorf("Open: %v, want ErrNoFAT saying %q", err, c.reason)
			}
		})
	}
}

func luksFormat(t *testing.T, img, typ string, args ...string) {
	t.Helper()
	cmd := exec.Command("cryptsetup", append([]string{"luksFormat", "--batch-mode", "--type", typ, "--pbkdf", "pbkdf2",
		"--pbkdf-force-iterations", "1000", "--key-file=-", img}, args...)...)
	cmd.Stdin = strings.NewReader("passphrase")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v\n%s", err, out)
	}
}

// isoImage makes an ISO 9660 image with xorriso; extra arguments may append a partition (an
// EFI system image, type 0xEF) to make a hybrid image with an MBR table.
func isoImage(t *testing.T, img string, extra ...string) {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "photo.jpg"), []byte("jpeg"), 0o644)
	args := []string{"-as", "mkisofs", "-V", "PHOTOS", "-o", img}
	if len(extra) > 0 {
		testenv.RequireTool(t, "mkfs.fat")
		efi := filepath.Join(t.TempDir(), "efi.img")
		run(t, "mkfs.fat", "-C", efi, "2048")
		args = append(append(args, extra...), efi)
	}
	run(t, "xorriso", append(args, dir)...)
}

// TestProbeLVM: an LVM2 physical volume made by pvcreate on a loop device.
func TestProbeLVM(t *testing.T) {
	testenv.RequireTool(t, "pvcreate", "blkid")
	testenv.RequireLoop(t)
	img := filepath.Join(t.TempDir(), "pv.img")
	os.WriteFile(img, nil, 0o600)
	os.Truncate(img, 16<<20)
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	defer exec.Command("losetup", "-d", loop).Run()
	if out, err := exec.Command("pvcreate", "-y", "--devices", loop, loop).CombinedOutput(); err != nil {
		t.Fatalf("pvcreate: %v\n%s", err, out)
	}
	if got := blkidType(t, loop); got != TypeLVM {
		t.Fatalf("blkid says %q", got)
	}
	dev, err := blockdev.Open(loop, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	r, err := Probe(dev)
	if err != nil {
		t.Fatal(err)
	}
	if r.Usable || r.Whole == nil || r.Whole.Type != TypeLVM || r.Reason != "it holds an LVM2 physical volume" {
		t.Fatalf("Probe: %+v", r)
	}
}

// TestProbeTables: FAT volumes are usable (a superfloppy, a FAT partition after a Linux one);
// a table with no FAT partition names each partition with what it holds; a blank medium is
// blank.
func TestProbeTables(t *testing.T) {
	testenv.RequireTool(t, "sfdisk", "mkfs.ext4", "mkfs.fat", "blkid")
	// Linux partition 1 with ext4 (made at its offset), FAT16 partition 2 (made by Format's
	// window), then the same with partition 2 a Linux swap type and no file system.
	img := sfdiskImage(t, 64<<20, "label: dos\nstart=2048, size=20480, type=83\nstart=22528, size=40960, type=6\n")
	run(t, "mkfs.ext4", "-q", "-F", "-L", "data", "-E", "offset=1048576", img, "10240")
	run(t, "mkfs.fat", "--offset", "22528", img, "20480")
	r := probeImage(t, img)
	if !r.Usable || r.FAT.Number != 2 {
		t.Fatalf("FAT partition 2 after an ext4 one: %+v", r)
	}

	img = sfdiskImage(t, 64<<20, "label: dos\nstart=2048, size=20480, type=83\nstart=22528, size=40960, type=82\n")
	run(t, "mkfs.ext4", "-q", "-F", "-L", "data", "-E", "offset=1048576", img, "10240")
	r = probeImage(t, img)
	want := `it has an MBR partition table with partition 1 (Linux (0x83), 10485760 bytes at 1048576): an ext4 file system labelled "data"; ` +
		"partition 2 (Linux swap (0x82), 20971520 bytes at 11534336): no file system signature, and no FAT partition"
	if r.Usable || r.Blank || r.Reason != want {
		t.Fatalf("reason:\n%s\nwant:\n%s", r.Reason, want)
	}

	sf := filepath.Join(t.TempDir(), "sf.img")
	run(t, "mkfs.fat", "-C", sf, "8192")
	if r := probeImage(t, sf); !r.Usable || r.FAT.Number != 0 || r.Layout.Kind != Superfloppy {
		t.Fatalf("superfloppy: %+v", r)
	}

	blank := filepath.Join(t.TempDir(), "blank.img")
	os.WriteFile(blank, make([]byte, 1<<20), 0o600)
	if r := probeImage(t, blank); r.Usable || !r.Blank || !strings.HasPrefix(r.Reason, "it is blank") {
		t.Fatalf("blank: %+v", r)
	}

	bad := filepath.Join(t.TempDir(), "overlap.img")
	b := make([]byte, 4<<20)
	setMBREntry(b, 0, 0, 0x0c, 100, 1000)
	setMBREntry(b, 1, 0, 0x0c, 200, 1000)
	os.WriteFile(bad, b, 0o600)
	if r := probeImage(t, bad); r.Usable || !strings.Contains(r.Reason, "overlaps") {
		t.Fatalf("overlapping table: %+v", r)
	}
}
