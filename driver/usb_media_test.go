package driver

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// Removable media as they come: partitioned sticks, foreign file systems, layouts, choosing a
// stick, the pool's metrics and hot plug.

// The partitioned stick of TestUSBAdoptPartitioned: an ext4 partition first, then the FAT one.
const (
	partStickSize = 64 << 20
	partFATStart  = 18432 * 512
)

// hashOutsideFAT hashes the stick's bytes before its FAT partition (the table and the ext4
// partition): the driver must never touch them.
func hashOutsideFAT(t *testing.T, dev string) [32]byte {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, partFATStart)); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// TestUSBAdoptPartitioned: a stick with an MBR, an ext4 partition and a FAT partition (made by
// sfdisk, mkfs.ext4 and mkfs.fat at their offsets, a file put in by mtools) is adopted with its
// files, in the driver and in mounter processes; what a pod writes lands in the FAT partition
// (mtools at its offset reads it, fsck.fat finds it clean on the kernel's partition device), the
// partitions cannot be claimed by the host while it is staged (O_EXCL on the whole stick), and the
// table and the ext4 partition stay byte for byte as they were.
func TestUSBAdoptPartitioned(t *testing.T) {
	t.Run("InProcess", func(t *testing.T) { testUSBAdoptPartitioned(t, nil) })
	t.Run("InMounters", func(t *testing.T) { testUSBAdoptPartitioned(t, withMounters) })
}

func testUSBAdoptPartitioned(t *testing.T, mode func(*Config)) {
	requireLoop(t)
	testenv.RequireTool(t, "sfdisk", "mkfs.ext4", "partx")
	fake := usbtest.New(t)
	stick := fake.Add(t, partStickSize, "Fake", "Card", "PART0001")
	sfdisk := exec.Command("sfdisk", "--no-reread", "--no-tell-kernel", "-q", stick.Loop)
	sfdisk.Stdin = strings.NewReader(fmt.Sprintf("label: dos\nstart=2048, size=16384, type=83\nstart=%d, type=c\n", partFATStart/512))
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	run(t, "mkfs.ext4", "-q", "-F", "-E", "offset=1048576", stick.Loop, "8M")
	fatKiB := (partStickSize - partFATStart) / 1024
	run(t, "mkfs.fat", fmt.Sprintf("--offset=%d", partFATStart/512), "-h", fmt.Sprint(partFATStart/512), "-n", "CARD",
		stick.Loop, fmt.Sprint(fatKiB))
	on := fmt.Sprintf("%s@@%d", stick.Loop, partFATStart)
	note := filepath.Join(t.TempDir(), "note.txt")
	os.WriteFile(note, []byte("from the camera\n"), 0o644)
	run(t, "mcopy", "-i", on, note, "::/NOTE.TXT")
	before := hashOutsideFAT(t, stick.Loop)

	td := startDriver(t, "", all(withUSB(fake), mode))
	vol, err := usbVolume(t, td, "card", 1, map[string]string{volume.ParamAdopt: "true"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	target := stageAndPublish(t, td, vol.GetVolumeId(), dir)
	if got, err := os.ReadFile(filepath.Join(target, "NOTE.TXT")); err != nil || string(got) != "from the camera\n" {
		t.Fatalf("adopted file reads %q, %v", got, err)
	}
	content := strings.Repeat("frame\n", 100000)
	if err := os.WriteFile(filepath.Join(target, "clip.raw"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	// While the volume is staged, the stick is held O_EXCL: the host cannot claim (mount) its
	// partitions either.
	if out, err := exec.Command("partx", "-a", stick.Loop).CombinedOutput(); err != nil {
		t.Fatalf("partx -a: %v\n%s", err, out)
	}
	defer exec.Command("partx", "-d", stick.Loop).Run()
	part := stick.Loop + "p2"
	for i := 0; i < 50; i++ {
		if _, err := os.Stat(part); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fd, err := unix.Open(part, unix.O_RDONLY|unix.O_EXCL, 0); err == nil {
		unix.Close(fd)
		t.Errorf("%s opened O_EXCL while its stick is staged", part)
	} else if err != unix.EBUSY {
		t.Errorf("O_EXCL open of %s: %v, want EBUSY", part, err)
	}
	unpublishAndUnstage(t, td, vol.GetVolumeId(), dir)
	if _, err := td.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}

	if hashOutsideFAT(t, stick.Loop) != before {
		t.Fatal("the table or the ext4 partition changed")
	}
	if got := run(t, "mtype", "-i", on, "::/clip.raw"); got != content {
		t.Errorf("mtype clip.raw at the partition's offset: %d bytes, want %d", len(got), len(content))
	}
	run(t, "fsck.fat", "-n", part)
}

// TestUSBFormatMBR: layout=mbr formats a stick as an MBR with one FAT partition from 1 MiB (sfdisk
// reads it back), a pod's file lands in that partition (mtools at its offset, fsck.fat on the
// kernel's partition device), and reclaim=wipe formats it the same way again, empty.
func TestUSBFormatMBR(t *testing.T) {
	requireLoop(t)
	testenv.RequireTool(t, "sfdisk", "partx")
	fake := usbtest.New(t)
	stick := fake.Add(t, partStickSize, "Fake", "Stick", "MBR0001")
	td := startDriver(t, "", all(withUSB(fake)))
	vol, err := usbVolume(t, td, "mbr", 1, map[string]string{volume.ParamLayout: volume.LayoutMBR, volume.ParamReclaim: volume.ReclaimWipe})
	if err != nil {
		t.Fatal(err)
	}
	if vol.GetCapacityBytes() != partStickSize-1<<20 {
		t.Errorf("the layout=mbr volume has %d bytes, want its partition's %d", vol.GetCapacityBytes(), partStickSize-1<<20)
	}
	table := fmt.Sprintf("%sp1 : start=        2048, size=      129024, type=6", stick.Loop)
	if dump := run(t, "sfdisk", "--dump", stick.Loop); !strings.Contains(dump, table) {
		t.Fatalf("sfdisk --dump:\n%s\nwant %q", dump, table)
	}
	dir := t.TempDir()
	target := stageAndPublish(t, td, vol.GetVolumeId(), dir)
	if err := os.WriteFile(filepath.Join(target, "data.txt"), []byte("in the partition\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unpublishAndUnstage(t, td, vol.GetVolumeId(), dir)
	on := fmt.Sprintf("%s@@%d", stick.Loop, 1<<20)
	if got := run(t, "mtype", "-i", on, "::/data.txt"); got != "in the partition\n" {
		t.Errorf("mtype data.txt at the partition's offset: %q", got)
	}
	if out, err := exec.Command("partx", "-a", stick.Loop).CombinedOutput(); err != nil {
		t.Fatalf("partx -a: %v\n%s", err, out)
	}
	part := stick.Loop + "p1"
	for i := 0; i < 50; i++ {
		if _, err := os.Stat(part); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	run(t, "fsck.fat", "-n", part)
	exec.Command("partx", "-d", stick.Loop).Run()

	if _, err := td.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if dump := run(t, "sfdisk", "--dump", stick.Loop); !strings.Contains(dump, table) {
		t.Fatalf("after reclaim=wipe, sfdisk --dump:\n%s\nwant %q", dump, table)
	}
	if out := run(t, "mdir", "-b", "-i", on, "::/"); strings.TrimSpace(out) != "" {
		t.Fatalf("after wipe the partition's root directory lists %q", out)
	}
}

// TestUSBForeignNotFormatted: sticks holding exFAT or ext4 (made by mkfs.exfat and mkfs.ext4) are
// not formatted for a new volume, the refusal naming what each holds, and stay byte for byte as
// they were; wipe=true formats one.
func TestUSBForeignNotFormatted(t *testing.T) {
	requireLoop(t)
	testenv.RequireTool(t, "mkfs.exfat", "mkfs.ext4")
	fake := usbtest.New(t)
	exfat := fake.Add(t, 48<<20, "Fake", "Camera", "FOREIGN1")
	ext4 := fake.Add(t, 64<<20, "Fake", "Linux", "FOREIGN2")
	run(t, "mkfs.exfat", exfat.Loop)
	run(t, "mkfs.ext4", "-q", "-F", ext4.Loop)
	hashes := map[string][32]byte{}
	for _, s := range []*usbtest.Stick{exfat, ext4} {
		hashes[s.Loop] = sha256Of(t, s.Loop)
	}
	td := startDriver(t, "", all(withUSB(fake)))
	for _, c := range []struct {
		params map[string]string
		want   int64
	}{
		{map[string]string{volume.ParamPool: volume.PoolUSB}, 0},
		{map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamAdopt: "true"}, 0},
		{map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamWipe: "true"}, ext4.Size},
	} {
		resp, err := td.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{Parameters: c.params})
		if err != nil || resp.GetAvailableCapacity() != c.want {
			t.Errorf("GetCapacity(%v) = %v, %v; want %d", c.params, resp, err, c.want)
		}
	}
	_, err := usbVolume(t, td, "fresh", 1, nil)
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "it holds an exFAT file system") ||
		!strings.Contains(err.Error(), "it holds an ext4 file system") || !strings.Contains(err.Error(), "wipe=true formats it") {
		t.Fatalf("new volume on foreign sticks: %v, want ResourceExhausted naming what each holds", err)
	}
	for _, s := range []*usbtest.Stick{exfat, ext4} {
		if sha256Of(t, s.Loop) != hashes[s.Loop] {
			t.Fatalf("%s changed", s.Loop)
		}
	}
	vol, err := usbVolume(t, td, "wiped", 1, map[string]string{volume.ParamWipe: "true"})
	if err != nil || vol.GetCapacityBytes() != exfat.Size {
		t.Fatalf("wipe=true: %v, %v; want the smaller (exFAT) stick", vol, err)
	}
	run(t, "fsck.fat", "-n", exfat.Loop)
	if sha256Of(t, ext4.Loop) != hashes[ext4.Loop] {
		t.Fatal("the ext4 stick changed")
	}
}

// TestUSBDeviceMetrics: csi_fat_usb_devices counts the pool's sticks by state and what they
// hold: one claimed by a volume, one with exFAT (mkfs.exfat), one with FAT (mkfs.fat), one blank,
// one with a FAT partition (sfdisk, mkfs.fat at its offset). Read in the driver, and by prober
// processes with mounters.
func TestUSBDeviceMetrics(t *testing.T) {
	t.Run("InProcess", func(t *testing.T) { testUSBDeviceMetrics(t, nil) })
	t.Run("InMounters", func(t *testing.T) { testUSBDeviceMetrics(t, withMounters) })
}

func testUSBDeviceMetrics(t *testing.T, mode func(*Config)) {
	requireLoop(t)
	testenv.RequireTool(t, "mkfs.exfat")
	fake := usbtest.New(t)
	fake.Add(t, 40<<20, "Fake", "Claimed", "METRIC1")
	exfat := fake.Add(t, 48<<20, "Fake", "Camera", "METRIC2")
	fat := fake.Add(t, 56<<20, "Fake", "Field", "METRIC3")
	fake.Add(t, 64<<20, "Fake", "New", "METRIC4")
	card := fake.Add(t, 72<<20, "Fake", "Card", "METRIC5")
	run(t, "mkfs.exfat", exfat.Loop)
	run(t, "mkfs.fat", fat.Loop)
	testenv.RequireTool(t, "sfdisk")
	sfdisk := exec.Command("sfdisk", "--no-reread", "--no-tell-kernel", "-q", card.Loop)
	sfdisk.Stdin = strings.NewReader("label: dos\nstart=2048, type=c\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	run(t, "mkfs.fat", "--offset=2048", card.Loop, fmt.Sprint((72<<20-1<<20)/1024))
	td := startDriver(t, "", all(withUSB(fake), mode, func(c *Config) { c.MetricsAddress = "127.0.0.1:0" }))
	if _, err := usbVolume(t, td, "first", 1, nil); err != nil {
		t.Fatal(err)
	}
	wantDeviceMetrics(t, scrapeMetrics(t, td),
		`csi_fat_usb_devices{content="",state="claimed"} 1`,
		`csi_fat_usb_devices{content="exfat",state="foreign"} 1`,
		`csi_fat_usb_devices{content="superfloppy",state="fat"} 1`,
		`csi_fat_usb_devices{content="partition",state="fat"} 1`,
		`csi_fat_usb_devices{content="",state="blank"} 1`)
}

// wantDeviceMetrics checks that a /metrics body has each of the lines.
func wantDeviceMetrics(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, want := range lines {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(body, "csi_fat_usb_devices"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestUSBPartitionHeld: a stick whose partition device-mapper holds (sysfs's holders of the
// partition) is busy: not claimed, the reason named, counted as busy/held.
func TestUSBPartitionHeld(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	stick := fake.Add(t, 48<<20, "Fake", "Crypt", "HELD0001")
	part := filepath.Join(stick.SysDir, stick.Kernel+"p1")
	if err := os.MkdirAll(filepath.Join(part, "holders", "dm-3"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(part, "dev"), []byte("259:99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDriver(t, "", all(withUSB(fake), func(c *Config) { c.MetricsAddress = "127.0.0.1:0" }))
	_, err := usbVolume(t, td, "held", 1, nil)
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "partition "+stick.Kernel+"p1 held by dm-3") {
		t.Fatalf("stick with a held partition: %v, want ResourceExhausted naming the holder", err)
	}
	wantDeviceMetrics(t, scrapeMetrics(t, td), `csi_fat_usb_devices{content="held",state="busy"} 1`)
}

// TestUSBSelect: StorageClass patterns choose the stick: by serial and model for a new volume
// (not the smallest free one), and by the label of the file system for an adopted one (CAM02,
// though CAM01's stick is smaller; the label read in the driver, or in the check's mounter
// process); sticks that do not match are named with the reason.
func TestUSBSelect(t *testing.T) {
	t.Run("InProcess", func(t *testing.T) { testUSBSelect(t, nil) })
	t.Run("InMounters", func(t *testing.T) { testUSBSelect(t, withMounters) })
}

func testUSBSelect(t *testing.T, mode func(*Config)) {
	requireLoop(t)
	fake := usbtest.New(t)
	cam1 := fake.Add(t, 40<<20, "Fake", "Camera", "CAM0001")
	cam2 := fake.Add(t, 48<<20, "Fake", "Camera", "CAM0002")
	fake.Add(t, 56<<20, "Fake", "Logger", "LOG0001")
	fake.Add(t, 64<<20, "Fake", "Logger", "LOG0002")
	run(t, "mkfs.fat", "-n", "CAM01", cam1.Loop)
	run(t, "mkfs.fat", "-n", "CAM02", cam2.Loop)
	td := startDriver(t, "", all(withUSB(fake), mode))

	for _, c := range []struct {
		params map[string]string
		want   int64
	}{
		{map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamModel: "Camera"}, cam2.Size},
		{map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamSerial: "LOG0001"}, 56 << 20},
		{map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamVendor: "SanDisk"}, 0},
		{map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamAdopt: "true"}, cam2.Size},
	} {
		resp, err := td.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{Parameters: c.params})
		if err != nil || resp.GetAvailableCapacity() != c.want {
			t.Errorf("GetCapacity(%v) = %v, %v; want %d", c.params, resp, err, c.want)
		}
	}
	vol, err := usbVolume(t, td, "cam", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamFSLabel: "CAM02"})
	if err != nil || vol.GetCapacityBytes() != cam2.Size {
		t.Fatalf("fsLabel=CAM02: %v, %v; want the CAM02 stick", vol, err)
	}
	_, err = usbVolume(t, td, "cam-none", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamFSLabel: "CAM09"})
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `file system label "CAM01" does not match fsLabel="CAM09"`) {
		t.Fatalf("fsLabel=CAM09: %v", err)
	}
	vol, err = usbVolume(t, td, "log", 1, map[string]string{volume.ParamModel: "Log*", volume.ParamSerial: "*2"})
	if err != nil || vol.GetCapacityBytes() != 64<<20 {
		t.Fatalf("model=Log* serial=*2: %v, %v; want LOG0002's stick", vol, err)
	}
	_, err = usbVolume(t, td, "none", 1, map[string]string{volume.ParamVendor: "SanDisk"})
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `vendor "Fake" does not match vendor="SanDisk"`) {
		t.Fatalf("vendor=SanDisk: %v", err)
	}
}

// TestUSBHotPlugCapacity: GetCapacity scans the sticks at every call, so one plugged in while the
// driver runs counts at once and one pulled out drops out at once, with the stick read in the
// driver or by prober processes (whose looks are reused for a moment, never for another stick).
func TestUSBHotPlugCapacity(t *testing.T) {
	t.Run("InProcess", func(t *testing.T) { testUSBHotPlugCapacity(t, nil) })
	t.Run("InMounters", func(t *testing.T) { testUSBHotPlugCapacity(t, withMounters) })
}

func testUSBHotPlugCapacity(t *testing.T, mode func(*Config)) {
	requireLoop(t)
	fake := usbtest.New(t)
	td := startDriver(t, "", all(withUSB(fake), mode))
	capacity := func() int64 {
		t.Helper()
		resp, err := td.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{Parameters: map[string]string{volume.ParamPool: volume.PoolUSB}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetAvailableCapacity()
	}
	if c := capacity(); c != 0 {
		t.Fatalf("no stick: capacity %d", c)
	}
	stick := fake.Add(t, 40<<20, "Fake", "Hot", "PLUG0001")
	if c := capacity(); c != stick.Size {
		t.Fatalf("stick plugged in: capacity %d, want %d", c, stick.Size)
	}
	fake.Unplug(t, stick)
	if c := capacity(); c != 0 {
		t.Fatalf("stick pulled out: capacity %d, want 0", c)
	}
	// A stick that the host makes foreign (ext4, kept without wipe=true) drops out within a
	// couple of seconds.
	testenv.RequireTool(t, "mkfs.ext4")
	other := fake.Add(t, 48<<20, "Fake", "Hot", "PLUG0002")
	if c := capacity(); c != other.Size {
		t.Fatalf("another stick plugged in: capacity %d, want %d", c, other.Size)
	}
	run(t, "mkfs.ext4", "-q", "-F", other.Loop)
	start := time.Now()
	for c := capacity(); c != 0; c = capacity() {
		if time.Since(start) > 3*time.Second {
			t.Fatalf("%v after mkfs.ext4: capacity %d, want 0", time.Since(start), c)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSDCard: an SD card in a built-in reader (an mmcblk disk on an MMC host in sysfs) is in the
// pool beside USB sticks, named by its card name and serial: partitioned as SD cards come (an MBR
// and a FAT32 partition at 4 MiB) it is adopted with its files, chosen by its model (the card's
// name), and found by its by-id name mmc-<name>_<serial>.
func TestSDCard(t *testing.T) {
	requireLoop(t)
	testenv.RequireTool(t, "sfdisk")
	fake := usbtest.New(t)
	fake.Add(t, 40<<20, "Fake", "Stick", "STICK001")
	card := fake.AddCard(t, 96<<20, "SD64G", "0x1234abcd")
	sfdisk := exec.Command("sfdisk", "--no-reread", "--no-tell-kernel", "-q", card.Loop)
	sfdisk.Stdin = strings.NewReader("label: dos\nstart=8192, type=c\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	run(t, "mkfs.fat", "-F", "32", "-s", "1", "--offset=8192", "-n", "DCIM", card.Loop, fmt.Sprint((96<<20-4<<20)/1024))
	on := fmt.Sprintf("%s@@%d", card.Loop, 4<<20)
	photo := filepath.Join(t.TempDir(), "photo.jpg")
	os.WriteFile(photo, []byte("jpeg"), 0o644)
	run(t, "mcopy", "-i", on, photo, "::/PHOTO.JPG")

	td := startDriver(t, "", all(withUSB(fake)))
	vol, err := usbVolume(t, td, "sd", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamModel: "SD64G", volume.ParamFSLabel: "DCIM"})
	if err != nil || vol.GetCapacityBytes() != card.Size-4<<20 {
		// The volume is the partition, from 4 MiB to the end.
		t.Fatalf("adopting the SD card: %v, %v; want its partition's %d bytes", vol, err, card.Size-4<<20)
	}
	dir := t.TempDir()
	target := stageAndPublish(t, td, vol.GetVolumeId(), dir)
	if got, err := os.ReadFile(filepath.Join(target, "PHOTO.JPG")); err != nil || string(got) != "jpeg" {
		t.Fatalf("PHOTO.JPG reads %q, %v", got, err)
	}
	unpublishAndUnstage(t, td, vol.GetVolumeId(), dir)
	state, err := os.ReadFile(filepath.Join(td.dir, "state", volume.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"device":\s*"mmc-SD64G_0x1234abcd"`).Match(state) {
		t.Errorf("the volume's device is not the card's by-id name:\n%s", state)
	}
}
