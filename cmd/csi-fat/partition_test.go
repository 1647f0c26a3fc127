package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// The SD-card-like image of the partition tests: a FAT32 boot partition at 4 MiB, as Raspberry
// Pi OS images have it, and an ext4 root after it.
const (
	sdBootStart = 8192 * 512
	sdBootSize  = 131072 * 512
	sdRootStart = sdBootStart + sdBootSize
	sdImageSize = 192 << 20
)

// attachPartitioned attaches img as a loop device with its partitions (losetup -P; partx -a
// where the kernel has no partition-table parsers) and returns the device and a function that
// detaches it now; it is detached at cleanup otherwise. Detaching once only matters: the number
// may be another test's device by then.
func attachPartitioned(t *testing.T, img string) (string, func()) {
	t.Helper()
	testenv.RequireLoop(t)
	out, err := exec.Command("losetup", "--find", "--show", "--partscan", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -P: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	var once sync.Once
	detach := func() {
		once.Do(func() {
			if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
				t.Errorf("losetup -d %s: %v: %s", dev, err, out)
			}
		})
	}
	t.Cleanup(detach)
	for i := 0; i < 50; i++ {
		if _, err := os.Stat(dev + "p1"); err == nil {
			return dev, detach
		}
		time.Sleep(20 * time.Millisecond)
	}
	testenv.RequireTool(t, "partx")
	if out, err := exec.Command("partx", "-a", dev).CombinedOutput(); err != nil {
		t.Fatalf("partx -a %s: %v: %s", dev, err, out)
	}
	return dev, detach
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

// sdCardImage makes the SD-card-like image: sfdisk's table, mkfs.fat on the loop device's first
// partition, mkfs.ext4 on its second, and PRE.TXT copied in by mtools.
func sdCardImage(t *testing.T) string {
	t.Helper()
	testenv.RequireTool(t, "sfdisk", "mkfs.fat", "mkfs.ext4", "mcopy", "fsck.fat")
	img := filepath.Join(t.TempDir(), "sdcard.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, sdImageSize); err != nil {
		t.Fatal(err)
	}
	sfdisk := exec.Command("sfdisk", "-q", img)
	sfdisk.Stdin = strings.NewReader(fmt.Sprintf("label: dos\nstart=%d, size=%d, type=c, bootable\nstart=%d, type=83\n",
		sdBootStart/512, sdBootSize/512, sdRootStart/512))
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	loop, detach := attachPartitioned(t, img)
	run(t, "mkfs.fat", "-F", "32", "-s", "1", "-n", "BOOT", loop+"p1")
	run(t, "mkfs.ext4", "-q", "-F", "-L", "rootfs", loop+"p2")
	detach()
	pre := filepath.Join(t.TempDir(), "pre.txt")
	os.WriteFile(pre, []byte("written by mcopy\n"), 0o644)
	run(t, "mcopy", "-i", fmt.Sprintf("%s@@%d", img, sdBootStart), pre, "::/PRE.TXT")
	return img
}

// hashRange hashes bytes [start, end) of a file (end < 0: to its end).
func hashRange(t *testing.T, path string, start, end int64) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if end < 0 {
		st, _ := f.Stat()
		end = st.Size()
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, start, end-start)); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// TestMountPartitionedImage: csi-fat mount of an SD card image serves its FAT boot partition;
// what it writes is read back by mtools at the partition's offset and fsck.fat on the kernel's
// partition device finds it clean, while the table and the ext4 root stay byte for byte as they
// were. -o partition=2 (ext4) is refused naming what it holds, and csi-fat fsck checks the boot
// partition of the image and of the loop device, or refuses --partition 2 the same way.
func TestMountPartitionedImage(t *testing.T) {
	mountTools(t, "mtype", "mdir")
	img := sdCardImage(t)
	bin := buildCsiFat(t)
	table := hashRange(t, img, 0, sdBootStart)
	root := hashRange(t, img, sdRootStart, -1)

	p := startMount(t, bin, img)
	if got, err := os.ReadFile(filepath.Join(p.dir, "PRE.TXT")); err != nil || string(got) != "written by mcopy\n" {
		t.Fatalf("PRE.TXT through the mount: %q, %v", got, err)
	}
	if err := os.MkdirAll(filepath.Join(p.dir, "overlays"), 0o755); err != nil {
		t.Fatal(err)
	}
	content := strings.Repeat("kernel=vmlinuz\n", 10000)
	if err := os.WriteFile(filepath.Join(p.dir, "overlays", "config.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	unmountAndWait(t, p)
	if !strings.Contains(p.stderr.String(), "partition 1 (W95 FAT32 (LBA) (0x0c)") {
		t.Errorf("csi-fat mount did not say which partition it served:\n%s", p.stderr)
	}

	on := fmt.Sprintf("%s@@%d", img, sdBootStart)
	if got := run(t, "mtype", "-i", on, "::/overlays/config.txt"); got != content {
		t.Errorf("mtype read %d bytes, want the %d written", len(got), len(content))
	}
	if hashRange(t, img, 0, sdBootStart) != table || hashRange(t, img, sdRootStart, -1) != root {
		t.Fatal("bytes outside the boot partition changed")
	}
	loop, detach := attachPartitioned(t, img)
	ref, err := exec.Command("fsck.fat", "-n", loop+"p1").CombinedOutput()
	if err != nil {
		t.Fatalf("fsck.fat -n %sp1: %v\n%s", loop, err, ref)
	}
	// The same summary as fsck.fat's on the partition device: "N files, U/T clusters".
	lines := strings.Split(strings.TrimSpace(string(ref)), "\n")
	_, summary, _ := strings.Cut(lines[len(lines)-1], ": ")
	if r := runBin(t, bin, "fsck", loop); r.code != 0 || !strings.Contains(r.stdout, loop+": "+summary) {
		t.Errorf("csi-fat fsck %s: exit %d, want the summary %q of fsck.fat\n%s%s", loop, r.code, summary, r.stdout, r.stderr)
	}
	detach()

	if r := runBin(t, bin, "fsck", "-partition", "1", img); r.code != 0 {
		t.Errorf("csi-fat fsck --partition 1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	before := sha256File(t, img)
	r := runBin(t, bin, "fsck", "--partition", "2", img)
	if r.code != fsckFailed || !strings.Contains(r.stderr, "partition 2 (Linux (0x83)") || !strings.Contains(r.stderr, `an ext4 file system labelled "rootfs"`) {
		t.Errorf("csi-fat fsck --partition 2 (ext4): exit %d, want %d naming the partition\n%s", r.code, fsckFailed, r.stderr)
	}
	dir := t.TempDir()
	code, out := runMountToExit(t, bin, "-o", "partition=2", img, dir)
	if code == 0 || !strings.Contains(out, "partition 2 (Linux (0x83)") {
		t.Errorf("mount -o partition=2 (ext4): exit %d\n%s", code, out)
	}
	code, out = runMountToExit(t, bin, "-o", "partition=3", img, dir)
	if code == 0 || !strings.Contains(out, "no such partition") {
		t.Errorf("mount -o partition=3: exit %d\n%s", code, out)
	}
	if sha256File(t, img) != before {
		t.Fatal("a refused mount or check changed the image")
	}
}

// TestMountNoFATPartition: a partitioned image with no FAT partition is refused with what it
// holds, and nothing is written.
func TestMountNoFATPartition(t *testing.T) {
	mountTools(t, "sfdisk")
	img := filepath.Join(t.TempDir(), "linux.img")
	os.WriteFile(img, nil, 0o600)
	os.Truncate(img, 16<<20)
	sfdisk := exec.Command("sfdisk", "-q", img)
	sfdisk.Stdin = strings.NewReader("label: gpt\nstart=2048, size=8192, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4\nstart=10240, type=0657FD6D-A4AB-43C4-84E5-0933C84B4F4F\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	bin := buildCsiFat(t)
	before := sha256File(t, img)
	code, out := runMountToExit(t, bin, img, t.TempDir())
	if code == 0 || !strings.Contains(out, "no FAT file system: it has a GPT partition table with partition 1 (Linux filesystem") ||
		!strings.Contains(out, "partition 2 (Linux swap") {
		t.Errorf("mount of a disk without FAT: exit %d\n%s", code, out)
	}
	if r := runBin(t, bin, "fsck", img); r.code != fsckFailed || !strings.Contains(r.stderr, "no FAT file system") {
		t.Errorf("fsck of a disk without FAT: exit %d\n%s", r.code, r.stderr)
	}
	if sha256File(t, img) != before {
		t.Fatal("the image changed")
	}

	testenv.RequireTool(t, "mkfs.exfat")
	exfat := filepath.Join(t.TempDir(), "exfat.img")
	os.WriteFile(exfat, nil, 0o600)
	os.Truncate(exfat, 16<<20)
	run(t, "mkfs.exfat", exfat)
	before = sha256File(t, exfat)
	code, out = runMountToExit(t, bin, exfat, t.TempDir())
	if code == 0 || !strings.Contains(out, "no FAT file system: it holds an exFAT file system") {
		t.Errorf("mount of an exFAT image: exit %d\n%s", code, out)
	}
	if sha256File(t, exfat) != before {
		t.Fatal("the exFAT image changed")
	}
}

// TestMkfsLayout: csi-fat mkfs --layout mbr makes a partitioned image that sfdisk reads as one
// FAT16 partition at 1 MiB and csi-fat fsck checks in that partition; a layout it does not know
// is refused before anything is created.
func TestMkfsLayout(t *testing.T) {
	testenv.RequireTool(t, "sfdisk", "fsck.fat")
	bin := buildCsiFat(t)
	img := filepath.Join(t.TempDir(), "stick.img")
	r := runBin(t, bin, "mkfs", "--layout", "mbr", "--size", "64M", img)
	if r.code != 0 || !strings.Contains(r.stdout, "MBR partition table, partition 1 (FAT16 (0x06), 66060288 bytes at 1048576)") {
		t.Fatalf("mkfs --layout mbr: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	dump := run(t, "sfdisk", "--dump", img)
	if !strings.Contains(dump, img+"1 : start=        2048, size=      129024, type=6") {
		t.Errorf("sfdisk --dump:\n%s", dump)
	}
	if r := runBin(t, bin, "fsck", img); r.code != 0 || !strings.Contains(r.stderr, "partition 1") {
		t.Errorf("fsck of the partitioned image: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	other := filepath.Join(t.TempDir(), "other.img")
	if r := runBin(t, bin, "mkfs", "--layout", "gpt", "--size", "64M", other); r.code != 1 || !strings.Contains(r.stderr, "want superfloppy or mbr") {
		t.Errorf("--layout gpt: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("a refused layout left %s behind: %v", other, err)
	}
	if r := runBin(t, bin, "mkfs", "--help"); !strings.Contains(r.stderr, "--layout superfloppy|mbr") {
		t.Errorf("mkfs --help does not mention --layout:\n%s", r.stderr)
	}
}

// TestFsckGPTPartition: on a GPT disk (sfdisk) whose second partition is a basic data partition
// holding FAT (mkfs.fat at its offset), csi-fat fsck checks that one by default and when named by
// its unique GUID (in lower case), with fsck.fat's summary, and refuses the Linux partition.
func TestFsckGPTPartition(t *testing.T) {
	testenv.RequireTool(t, "sfdisk", "mkfs.fat", "fsck.fat", "mcopy")
	img := filepath.Join(t.TempDir(), "gpt.img")
	os.WriteFile(img, nil, 0o600)
	os.Truncate(img, 48<<20)
	sfdisk := exec.Command("sfdisk", "-q", img)
	sfdisk.Stdin = strings.NewReader("label: gpt\nstart=2048, size=8192, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4\n" +
		"start=10240, size=65536, type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	run(t, "mkfs.fat", "--offset=10240", img, "32768")
	src := filepath.Join(t.TempDir(), "a.txt")
	os.WriteFile(src, []byte("a\n"), 0o644)
	run(t, "mcopy", "-i", img+"@@5242880", src, "::/A.TXT")
	out, err := exec.Command("sfdisk", "--json", img).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"uuid":\s*"([0-9A-F-]{36})"`).FindAllStringSubmatch(string(out), -1)
	if len(m) != 2 {
		t.Fatalf("sfdisk --json: no two partition GUIDs:\n%s", out)
	}
	guid := m[1][1]
	bin := buildCsiFat(t)
	for _, args := range [][]string{{"fsck", img}, {"fsck", "--partition", strings.ToLower(guid), img}} {
		r := runBin(t, bin, args...)
		if r.code != 0 || !strings.Contains(r.stderr, "partition 2 (Microsoft basic data "+guid) || !strings.Contains(r.stdout, ": 1 files, 1/") {
			t.Errorf("csi-fat %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runBin(t, bin, "fsck", "--partition", "1", img); r.code != fsckFailed || !strings.Contains(r.stderr, "partition 1 (Linux filesystem") {
		t.Errorf("fsck --partition 1: exit %d\n%s", r.code, r.stderr)
	}
}
