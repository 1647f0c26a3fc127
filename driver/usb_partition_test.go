package driver

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-fat/csi-fat/internal/testenv"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"
)

// One volume per FAT partition of a stick.

// span is a partition's bytes on its stick.
type span struct{ start, size int64 }

// The two-partition stick: FAT, a Linux partition of other data between, FAT.
var (
	mbrParts = []span{{1 << 20, 15 << 20}, {16 << 20, 2 << 20}, {18 << 20, 46 << 20}}
)

// hashOutside hashes every byte of the device outside the spans: the table, gaps and other
// partitions, which the driver must never touch.
func hashOutside(t *testing.T, dev string, spans ...span) [32]byte {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	off := int64(0)
	for _, s := range spans {
		io.Copy(h, io.NewSectionReader(f, off, s.start-off))
		off = s.start + s.size
	}
	io.Copy(h, io.NewSectionReader(f, off, size-off))
	return [32]byte(h.Sum(nil))
}

// fsckAt runs fsck.fat -n on a read-only loop device over one span of dev.
func fsckAt(t *testing.T, dev string, s span) {
	t.Helper()
	loop := strings.TrimSpace(run(t, "losetup", "-f", "--show", "-r", "-o", fmt.Sprint(s.start), "--sizelimit", fmt.Sprint(s.size), dev))
	defer exec.Command("losetup", "-d", loop).Run()
	run(t, "fsck.fat", "-n", loop)
}

// makeFATAt formats a span with mkfs.fat at its offset and puts a note in it with mtools.
func makeFATAt(t *testing.T, dev string, s span, label, note string) string {
	t.Helper()
	run(t, "mkfs.fat", fmt.Sprintf("--offset=%d", s.start/512), "-h", fmt.Sprint(s.start/512), "-n", label, dev, fmt.Sprint(s.size/1024))
	on := fmt.Sprintf("%s@@%d", dev, s.start)
	f := filepath.Join(t.TempDir(), "note.txt")
	os.WriteFile(f, []byte(note), 0o644)
	run(t, "mcopy", "-i", on, f, "::/NOTE.TXT")
	return on
}

func sfdiskWrite(t *testing.T, dev, script string) {
	t.Helper()
	c := exec.Command("sfdisk", "--no-reread", "--no-tell-kernel", "-q", dev)
	c.Stdin = strings.NewReader(script)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
}

// TestUSBPartitionVolumes: a stick with an MBR holding two FAT partitions and a Linux partition
// between them (sfdisk, mkfs.fat at the offsets, random bytes in the Linux one) gives two
// volumes, each of its partition's size; GetCapacity answers the largest free partition; a third
// claim and a claim that would format the stick find nothing; each volume is written through its
// own mount, both served at once (the second beside the first's claim on the stick); mtools at each
// offset reads each volume's files, fsck.fat finds both clean, and every byte outside the two
// partitions stays as it was; reclaim=wipe of one leaves an empty file system in it and the
// other's files.
func TestUSBPartitionVolumes(t *testing.T) {
	t.Run("InProcess", func(t *testing.T) { testUSBPartitionVolumes(t, nil) })
	t.Run("InMounters", func(t *testing.T) { testUSBPartitionVolumes(t, withMounters) })
}

func testUSBPartitionVolumes(t *testing.T, mode func(*Config)) {
	requireLoop(t)
	testenv.RequireTool(t, "sfdisk", "losetup", "fsck.fat", "mtype")
	fake := usbtest.New(t)
	stick := fake.Add(t, 64<<20, "Fake", "Twin", "TWIN0001")
	one, other, two := mbrParts[0], mbrParts[1], mbrParts[2]
	sfdiskWrite(t, stick.Loop, fmt.Sprintf("label: dos\nstart=%d, size=%d, type=c\nstart=%d, size=%d, type=83\nstart=%d, type=c\n",
		one.start/512, one.size/512, other.start/512, other.size/512, two.start/512))
	run(t, "dd", "if=/dev/urandom", "of="+stick.Loop, "bs=1M", fmt.Sprintf("seek=%d", other.start>>20), fmt.Sprintf("count=%d", other.size>>20), "conv=notrunc", "status=none")
	onOne := makeFATAt(t, stick.Loop, one, "ONE", "first\n")
	onTwo := makeFATAt(t, stick.Loop, two, "TWO", "second\n")
	table := run(t, "sfdisk", "--dump", stick.Loop)
	before := hashOutside(t, stick.Loop, one, two)

	td := startDriver(t, "", all(withUSB(fake), mode, func(c *Config) { c.MetricsAddress = "127.0.0.1:0" }))
	ctx := context.Background()
	adopt := map[string]string{volume.ParamPool: volume.PoolMedia, volume.ParamAdopt: "true"}
	if c, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: adopt}); err != nil || c.GetAvailableCapacity() != two.size {
		t.Fatalf("GetCapacity(adopt) = %v, %v; want the larger partition's %d bytes", c, err, two.size)
	}
	a, err := usbVolume(t, td, "a", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamReclaim: volume.ReclaimWipe})
	if err != nil || a.GetCapacityBytes() != one.size {
		t.Fatalf("first volume: %v, %v; want partition 1's %d bytes", a, err, one.size)
	}
	if c, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: adopt}); err != nil || c.GetAvailableCapacity() != two.size {
		t.Fatalf("GetCapacity(adopt) after one claim = %v, %v; want %d", c, err, two.size)
	}
	if c, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{volume.ParamPool: volume.PoolMedia, volume.ParamWipe: "true"}}); err != nil || c.GetAvailableCapacity() != 0 {
		t.Fatalf("GetCapacity(format) with a partition claimed = %v, %v; want 0: the stick is not formatted while partly claimed", c, err)
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	target := stageAndPublish(t, td, a.GetVolumeId(), dirA)
	if got, err := os.ReadFile(filepath.Join(target, "NOTE.TXT")); err != nil || string(got) != "first\n" {
		t.Fatalf("volume a reads NOTE.TXT %q, %v", got, err)
	}
	contentA := strings.Repeat("a", 3<<20)
	if err := os.WriteFile(filepath.Join(target, "a.bin"), []byte(contentA), 0o644); err != nil {
		t.Fatal(err)
	}
	// While a is staged (the stick held O_EXCL), the other partition is checked and adopted beside
	// it.
	b, err := usbVolume(t, td, "b", 1, map[string]string{volume.ParamAdopt: "true"})
	if err != nil || b.GetCapacityBytes() != two.size {
		t.Fatalf("second volume: %v, %v; want partition 3's %d bytes", b, err, two.size)
	}
	if _, err := usbVolume(t, td, "c", 1, map[string]string{volume.ParamAdopt: "true"}); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "claimed by volume") {
		t.Fatalf("third adopting volume: %v; want ResourceExhausted naming the claims", err)
	}
	if _, err := usbVolume(t, td, "d", 1, map[string]string{volume.ParamWipe: "true"}); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "volumes hold its partitions") {
		t.Fatalf("formatting volume: %v; want ResourceExhausted: the stick's partitions are claimed", err)
	}
	if c, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: adopt}); err != nil || c.GetAvailableCapacity() != 0 {
		t.Fatalf("GetCapacity(adopt) with both claimed = %v, %v; want 0", c, err)
	}

	// /media lists both partitions, claimed.
	body, code := getMedia(t, td, "json")
	var seen []media.Status
	if code != 200 || json.Unmarshal([]byte(body), &seen) != nil {
		t.Fatalf("/media: %d %s", code, body)
	}
	var parts []media.PartitionStatus
	for _, m := range seen {
		if m.Serial == "TWIN0001" {
			parts = m.Partitions
		}
	}
	if len(parts) != 2 || parts[0].Number != 1 || parts[0].Size != one.size || parts[0].Volume != a.GetVolumeId() ||
		parts[1].Number != 3 || parts[1].Size != two.size || parts[1].Volume != b.GetVolumeId() {
		t.Fatalf("/media partitions of the stick: %+v\n%s", parts, body)
	}
	if text, _ := getMedia(t, td, ""); !strings.Contains(text, "partition 3") || !strings.Contains(text, "claimed by volume "+b.GetVolumeId()) {
		t.Errorf("/media's table does not list partition 3 claimed by %s:\n%s", b.GetVolumeId(), text)
	}

	// Both are served at once: b beside a's claim on the stick, each writing inside its own
	// partition only.
	targetA := target
	target = stageAndPublish(t, td, b.GetVolumeId(), dirB)
	if got, err := os.ReadFile(filepath.Join(target, "NOTE.TXT")); err != nil || string(got) != "second\n" {
		t.Fatalf("volume b reads NOTE.TXT %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(target, "a.bin")); err == nil {
		t.Fatal("volume b shows volume a's file")
	}
	contentB := strings.Repeat("b", 5<<20)
	if err := os.WriteFile(filepath.Join(target, "b.bin"), []byte(contentB), 0o644); err != nil {
		t.Fatal(err)
	}
	contentA2 := strings.Repeat("A", 2<<20)
	if err := os.WriteFile(filepath.Join(targetA, "a2.bin"), []byte(contentA2), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(targetA, "a.bin")); err != nil || string(got) != contentA {
		t.Fatalf("volume a's a.bin while b is served: %d bytes, %v", len(got), err)
	}
	// a ends first: b goes on writing without it.
	unpublishAndUnstage(t, td, a.GetVolumeId(), dirA)
	contentB2 := strings.Repeat("B", 1<<20)
	if err := os.WriteFile(filepath.Join(target, "b2.bin"), []byte(contentB2), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: b.GetVolumeId(), VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range st.GetUsage() {
		if u.GetUnit() == csi.VolumeUsage_BYTES && (u.GetTotal() > two.size || u.GetTotal() < two.size*9/10) {
			t.Errorf("volume b's stats total %d bytes, want about its partition's %d", u.GetTotal(), two.size)
		}
	}
	if _, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: b.GetVolumeId(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: two.size + 1}}); status.Code(err) != codes.OutOfRange {
		t.Errorf("expanding volume b past its partition: %v, want OutOfRange", err)
	}
	unpublishAndUnstage(t, td, b.GetVolumeId(), dirB)

	if got := run(t, "mtype", "-i", onOne, "::/a.bin"); got != contentA {
		t.Errorf("a.bin at partition 1's offset: %d bytes, want %d", len(got), len(contentA))
	}
	if got := run(t, "mtype", "-i", onTwo, "::/b.bin"); got != contentB {
		t.Errorf("b.bin at partition 3's offset: %d bytes, want %d", len(got), len(contentB))
	}
	if got := run(t, "mtype", "-i", onOne, "::/a2.bin"); got != contentA2 {
		t.Errorf("a2.bin at partition 1's offset: %d bytes, want %d", len(got), len(contentA2))
	}
	if got := run(t, "mtype", "-i", onTwo, "::/b2.bin"); got != contentB2 {
		t.Errorf("b2.bin at partition 3's offset: %d bytes, want %d", len(got), len(contentB2))
	}
	fsckAt(t, stick.Loop, one)
	fsckAt(t, stick.Loop, two)
	if hashOutside(t, stick.Loop, one, two) != before {
		t.Fatal("bytes outside the two FAT partitions changed")
	}

	// reclaim=wipe of a: an empty file system in partition 1, nothing else touched.
	if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if out := run(t, "mdir", "-b", "-i", onOne, "::/"); strings.TrimSpace(out) != "" {
		t.Errorf("after the wipe partition 1 lists %q", out)
	}
	fsckAt(t, stick.Loop, one)
	if got := run(t, "mtype", "-i", onTwo, "::/b.bin"); got != contentB {
		t.Errorf("after the wipe of partition 1, b.bin reads %d bytes, want %d", len(got), len(contentB))
	}
	if got := run(t, "sfdisk", "--dump", stick.Loop); got != table {
		t.Errorf("the wipe changed the table:\n%s\nwas\n%s", got, table)
	}
	if hashOutside(t, stick.Loop, one, two) != before {
		t.Fatal("the wipe changed bytes outside the two FAT partitions")
	}
	// The freed partition is a volume again.
	if c, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: adopt}); err != nil || c.GetAvailableCapacity() != one.size {
		t.Fatalf("GetCapacity(adopt) after the delete = %v, %v; want %d", c, err, one.size)
	}
	if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: b.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if got := run(t, "mtype", "-i", onTwo, "::/b.bin"); got != contentB {
		t.Errorf("after reclaim=keep, b.bin reads %d bytes, want %d", len(got), len(contentB))
	}
}

// TestUSBPartitionGPT: on a GPT stick with two basic data partitions named DATA and LOGS (sfdisk,
// their GUIDs set), the partition parameter chooses by GUID, by number and by a pattern on the
// name; a volume is the partition's size and records it by its GUID; what a pod writes lands in
// that partition (mtools at its offset); a number or name that matches no free partition finds
// nothing; bad values are InvalidArgument. The table read in the driver, or by prober processes
// with mounters.
func TestUSBPartitionGPT(t *testing.T) {
	t.Run("InProcess", func(t *testing.T) { testUSBPartitionGPT(t, nil) })
	t.Run("InMounters", func(t *testing.T) { testUSBPartitionGPT(t, withMounters) })
}

func testUSBPartitionGPT(t *testing.T, mode func(*Config)) {
	requireLoop(t)
	testenv.RequireTool(t, "sfdisk", "mtype")
	fake := usbtest.New(t)
	stick := fake.Add(t, 64<<20, "Fake", "Guid", "GPT00001")
	data, logs := span{1 << 20, 20 << 20}, span{21 << 20, 30 << 20}
	const guidData, guidLogs = "11111111-2222-4333-8444-555555555555", "AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE"
	sfdiskWrite(t, stick.Loop, fmt.Sprintf("label: gpt\nstart=%d, size=%d, type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7, uuid=%s, name=DATA\n"+
		"start=%d, size=%d, type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7, uuid=%s, name=LOGS\n",
		data.start/512, data.size/512, guidData, logs.start/512, logs.size/512, guidLogs))
	makeFATAt(t, stick.Loop, data, "DATA", "data\n")
	onLogs := makeFATAt(t, stick.Loop, logs, "LOGS", "logs\n")
	before := hashOutside(t, stick.Loop, data, logs)

	td := startDriver(t, "", all(withUSB(fake), mode))
	ctx := context.Background()
	for _, bad := range []string{"0", "4097", "", "1x[", "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeeg"} {
		_, err := usbVolume(t, td, "bad", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamPartition: bad})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "partition") {
			t.Errorf("partition=%q: %v, want InvalidArgument naming the parameter", bad, err)
		}
	}
	if _, err := usbVolume(t, td, "bad", 1, map[string]string{volume.ParamPartition: "1"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("partition without adopt: %v, want InvalidArgument", err)
	}
	byGUID := map[string]string{volume.ParamPool: volume.PoolMedia, volume.ParamAdopt: "true", volume.ParamPartition: strings.ToLower(guidLogs)}
	if c, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: byGUID}); err != nil || c.GetAvailableCapacity() != logs.size {
		t.Fatalf("GetCapacity(partition=GUID) = %v, %v; want %d", c, err, logs.size)
	}
	logsVol, err := usbVolume(t, td, "logs", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamPartition: strings.ToLower(guidLogs)})
	if err != nil || logsVol.GetCapacityBytes() != logs.size {
		t.Fatalf("volume by GUID: %v, %v; want %d bytes", logsVol, err, logs.size)
	}
	state, err := os.ReadFile(filepath.Join(td.dir, "state", volume.StateFile))
	if err != nil || !strings.Contains(string(state), `"partition": "`+guidLogs+`"`) && !strings.Contains(string(state), `"partition":"`+guidLogs+`"`) {
		t.Errorf("the state does not record the partition by its GUID %s: %v\n%s", guidLogs, err, state)
	}
	if _, err := usbVolume(t, td, "again", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamPartition: "2"}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("partition=2, claimed: %v, want ResourceExhausted", err)
	}
	if _, err := usbVolume(t, td, "none", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamPartition: "BOOT*"}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("partition=BOOT*: %v, want ResourceExhausted", err)
	}
	dataVol, err := usbVolume(t, td, "data", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamPartition: "DAT?"})
	if err != nil || dataVol.GetCapacityBytes() != data.size {
		t.Fatalf("volume by name: %v, %v; want %d bytes", dataVol, err, data.size)
	}

	dir := t.TempDir()
	target := stageAndPublish(t, td, logsVol.GetVolumeId(), dir)
	if got, err := os.ReadFile(filepath.Join(target, "NOTE.TXT")); err != nil || string(got) != "logs\n" {
		t.Fatalf("the GUID's volume reads NOTE.TXT %q, %v", got, err)
	}
	os.WriteFile(filepath.Join(target, "today.log"), []byte("all well\n"), 0o644)
	unpublishAndUnstage(t, td, logsVol.GetVolumeId(), dir)
	if got := run(t, "mtype", "-i", onLogs, "::/today.log"); got != "all well\n" {
		t.Errorf("today.log at the LOGS partition's offset: %q", got)
	}
	fsckAt(t, stick.Loop, logs)
	fsckAt(t, stick.Loop, data)
	if hashOutside(t, stick.Loop, data, logs) != before {
		t.Fatal("bytes outside the FAT partitions changed (the GPT, its backup)")
	}
}

// TestUSBPartitionOldRecord: a volume recorded before partitions were volumes of their own (no
// partition in its record: the state file of an older driver) keeps the whole stick: it is served
// in the first FAT partition, and no other volume may adopt the stick's other FAT partition.
// A stick formatted for a new volume (layout=mbr) is claimed whole too.
func TestUSBPartitionOldRecord(t *testing.T) {
	requireLoop(t)
	testenv.RequireTool(t, "sfdisk", "mtype")
	fake := usbtest.New(t)
	stick := fake.Add(t, 64<<20, "Fake", "Twin", "OLD00001")
	one, other, two := mbrParts[0], mbrParts[1], mbrParts[2]
	sfdiskWrite(t, stick.Loop, fmt.Sprintf("label: dos\nstart=%d, size=%d, type=c\nstart=%d, size=%d, type=83\nstart=%d, type=c\n",
		one.start/512, one.size/512, other.start/512, other.size/512, two.start/512))
	onOne := makeFATAt(t, stick.Loop, one, "ONE", "first\n")
	makeFATAt(t, stick.Loop, two, "TWO", "second\n")

	dir := t.TempDir()
	td := startDriver(t, dir, all(withUSB(fake)))
	vol, err := usbVolume(t, td, "old", 1, map[string]string{volume.ParamAdopt: "true"})
	if err != nil {
		t.Fatal(err)
	}
	td.shutdown(t)
	// The record as an older driver wrote it: no partition.
	statePath := filepath.Join(dir, "state", volume.StateFile)
	state, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(state, &raw); err != nil {
		t.Fatal(err)
	}
	rec := raw["volumes"].(map[string]any)["old"].(map[string]any)
	if rec["partition"] != "1" {
		t.Fatalf("the new record's partition is %v, want 1", rec["partition"])
	}
	delete(rec, "partition")
	state, _ = json.Marshal(raw)
	if err := os.WriteFile(statePath, state, 0o600); err != nil {
		t.Fatal(err)
	}

	td = startDriver(t, dir, all(withUSB(fake)))
	if _, err := usbVolume(t, td, "new", 1, map[string]string{volume.ParamAdopt: "true"}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("adopting beside an old whole-stick record: %v, want ResourceExhausted", err)
	}
	mnt := t.TempDir()
	target := stageAndPublish(t, td, vol.GetVolumeId(), mnt)
	if got, err := os.ReadFile(filepath.Join(target, "NOTE.TXT")); err != nil || string(got) != "first\n" {
		t.Fatalf("the old record's volume reads NOTE.TXT %q, %v; want the first FAT partition's", got, err)
	}
	os.WriteFile(filepath.Join(target, "old.txt"), []byte("still here\n"), 0o644)
	unpublishAndUnstage(t, td, vol.GetVolumeId(), mnt)
	if got := run(t, "mtype", "-i", onOne, "::/old.txt"); got != "still here\n" {
		t.Errorf("old.txt at partition 1's offset: %q", got)
	}

	// A blank stick formatted with layout=mbr is claimed whole: its partition is not adopted.
	blank := fake.Add(t, 80<<20, "Fake", "Blank", "OLD00002")
	fresh, err := usbVolume(t, td, "fresh", 1, map[string]string{volume.ParamLayout: volume.LayoutMBR})
	if err != nil || fresh.GetCapacityBytes() != blank.Size-1<<20 {
		t.Fatalf("layout=mbr volume: %v, %v; want its partition's %d bytes", fresh, err, blank.Size-1<<20)
	}
	if _, err := usbVolume(t, td, "newer", 1, map[string]string{volume.ParamAdopt: "true"}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("adopting the formatted stick's partition: %v, want ResourceExhausted", err)
	}
}
