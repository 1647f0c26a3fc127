package driver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// fat16Disk is raw access to the FAT16 file system on an image or a device, to damage it by
// hand as a crash or a faulty writer would.
type fat16Disk struct {
	path string
	bs   *ondisk.BootSector
	g    ondisk.Geometry
}

func openFAT16(t *testing.T, path string) *fat16Disk {
	t.Helper()
	d := &fat16Disk{path: path}
	bs, err := ondisk.ParseBootSector(d.read(t, 0, 512))
	if err != nil {
		t.Fatal(err)
	}
	g, err := bs.Geometry(0)
	if err != nil {
		t.Fatal(err)
	}
	if g.Type != ondisk.FAT16 {
		t.Fatalf("%s is %v; the test damages FAT16 only", path, g.Type)
	}
	d.bs, d.g = bs, g
	return d
}

func (d *fat16Disk) read(t *testing.T, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(d.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, n)
	if _, err := f.ReadAt(p, off); err != nil {
		t.Fatal(err)
	}
	return p
}

func (d *fat16Disk) write(t *testing.T, off int64, p []byte) {
	t.Helper()
	f, err := os.OpenFile(d.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// setFAT sets a FAT entry in the given copies.
func (d *fat16Disk) setFAT(t *testing.T, cluster uint32, value uint16, copies ...int) {
	t.Helper()
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], value)
	for _, i := range copies {
		d.write(t, d.g.FATOffset(i)+int64(cluster)*2, b[:])
	}
}

func (d *fat16Disk) fat(t *testing.T, copy int, cluster uint32) uint16 {
	t.Helper()
	return binary.LittleEndian.Uint16(d.read(t, d.g.FATOffset(copy)+int64(cluster)*2, 2))
}

func (d *fat16Disk) dirty(t *testing.T) bool {
	t.Helper()
	return d.read(t, int64(d.bs.StateOffset()), 1)[0]&ondisk.StateDirty != 0
}

// crashLeftovers sets the dirty bit and makes a chain of two clusters allocated in the first
// FAT only, linked from no entry: what a writer killed between its FAT and directory writes
// leaves. It returns the chain.
func (d *fat16Disk) crashLeftovers(t *testing.T) []uint32 {
	t.Helper()
	c := d.g.Clusters - 10
	d.setFAT(t, c, uint16(c+1), 0)
	d.setFAT(t, c+1, 0xFFFF, 0)
	d.write(t, int64(d.bs.StateOffset()), []byte{d.bs.State | ondisk.StateDirty})
	return []uint32{c, c + 1}
}

// crossLink points the root entry with the 11-byte short name at cluster.
func (d *fat16Disk) crossLink(t *testing.T, name string, cluster uint32) {
	t.Helper()
	root := d.read(t, d.g.RootDirSector*int64(d.g.SectorSize), d.g.RootEntries*ondisk.DirEntrySize)
	for off := 0; off < len(root); off += ondisk.DirEntrySize {
		if string(root[off:off+11]) == name {
			var b [2]byte
			binary.LittleEndian.PutUint16(b[:], uint16(cluster))
			d.write(t, d.g.RootDirSector*int64(d.g.SectorSize)+int64(off)+26, b[:])
			return
		}
	}
	t.Fatalf("no root entry %q in %s", name, d.path)
}

var chainRE = regexp.MustCompile(`<(\d+)`)

// firstCluster asks mshowfat for the first cluster of a file.
func firstCluster(t *testing.T, path, file string) uint32 {
	t.Helper()
	m := chainRE.FindStringSubmatch(run(t, "mshowfat", "-i", path, "::"+file))
	if m == nil {
		t.Fatalf("mshowfat %s: no chain", file)
	}
	n, _ := strconv.Atoi(m[1])
	return uint32(n)
}

// fsckClean tells whether fsck.fat -n finds nothing to repair, with its output.
func fsckClean(t *testing.T, path string) (bool, string) {
	t.Helper()
	out, err := exec.Command("fsck.fat", "-n", path).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return err == nil, string(out)
}

// damageFiles are what each test writes through the driver before damaging the volume.
var damageFiles = map[string][]byte{
	"A.TXT": bytes.Repeat([]byte("first file "), 1000),
	"B.TXT": bytes.Repeat([]byte("second file "), 1000),
}

// fillVolume stages and publishes the volume under dir, writes damageFiles and unstages it.
func fillVolume(t *testing.T, td *testDriver, id, dir string) {
	t.Helper()
	target := stageAndPublish(t, td, id, dir)
	for name, b := range damageFiles {
		if err := os.WriteFile(filepath.Join(target, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unpublishAndUnstage(t, td, id, dir)
}

func createVolume(t *testing.T, td *testDriver, name string, params map[string]string) string {
	t.Helper()
	p := map[string]string{volume.ParamFATType: "16"}
	for k, v := range params {
		p[k] = v
	}
	resp, err := td.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}, Parameters: p})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVolume().GetVolumeId()
}

func condition(t *testing.T, td *testDriver, id, path string) *csi.VolumeCondition {
	t.Helper()
	resp, err := td.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVolumeCondition()
}

// checkFiles requires the target to hold damageFiles.
func checkFiles(t *testing.T, target string) {
	t.Helper()
	for name, want := range damageFiles {
		got, err := os.ReadFile(filepath.Join(target, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want the %d bytes written", name, len(got), err, len(want))
		}
	}
}

// TestStagingRepairsAfterKill: the plugin is killed (SIGKILL) with a volume published, which
// leaves the dirty bit set, and a lost chain is added as an unlucky crash would leave it. The
// next plugin process checks the volume before serving it again: the lost chain is freed in
// both FATs before the volume is served read-write with a normal condition, the files are
// intact, and after unstaging fsck.fat -n finds nothing.
func TestStagingRepairsAfterKill(t *testing.T) {
	requireFUSE(t)
	testenv.RequireTool(t, "fsck.fat", "mshowfat")
	dir := t.TempDir()
	t.Cleanup(func() { detachUnder(t, dir) })
	ctx := context.Background()
	c := startChild(t, dir)
	vol, err := c.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "killed", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}, Parameters: map[string]string{volume.ParamFATType: "16"}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	if _, err := c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	for name, b := range damageFiles {
		writeSynced(t, filepath.Join(target, name), string(b))
	}
	c.end(t, syscall.SIGKILL)

	img := filepath.Join(dir, "pool", "killed.img")
	disk := openFAT16(t, img)
	if !disk.dirty(t) {
		t.Fatal("the dirty bit is not set after the kill")
	}
	lost := disk.crashLeftovers(t)
	if clean, out := fsckClean(t, img); clean {
		t.Fatalf("fsck.fat -n finds the damaged image clean:\n%s", out)
	}

	td := startDriver(t, dir, nil) // restores the staged and published volume
	for _, cl := range lost {
		for copy := 0; copy < disk.g.NumFATs; copy++ {
			if v := disk.fat(t, copy, cl); v != 0 {
				t.Errorf("lost cluster %d is 0x%04x in FAT %d after the volume is served again; want it freed", cl, v, copy+1)
			}
		}
	}
	if cond := condition(t, td, id, target); cond.GetAbnormal() {
		t.Errorf("condition after the repair: %v", cond)
	}
	checkFiles(t, target)
	writeSynced(t, filepath.Join(target, "AFTER.TXT"), "written after the repair\n")
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if clean, out := fsckClean(t, img); !clean {
		t.Fatalf("fsck.fat -n after unstaging:\n%s", out)
	}
}

// TestStagingCrossLinkedVolume: a volume whose files share clusters cannot be repaired safely.
// With the default policy it is served read-only: its files can be read, writes fail with
// EROFS, the condition is abnormal and names the problem, and not a byte of the image changes.
// With onDamage=fail staging fails with FailedPrecondition naming the problem, nothing is
// mounted and the image is untouched. With onDamage=readonly even a volume that only has its
// dirty bit set is served read-only, untouched.
func TestStagingCrossLinkedVolume(t *testing.T) {
	requireFUSE(t)
	testenv.RequireTool(t, "fsck.fat", "mshowfat")
	td := startDriver(t, "", nil)
	ctx := context.Background()
	for _, tc := range []struct {
		policy   string
		crossed  bool
		wantFail bool
	}{
		{policy: "", crossed: true},
		{policy: volume.OnDamageRepair, crossed: true},
		{policy: volume.OnDamageFail, crossed: true, wantFail: true},
		{policy: volume.OnDamageReadOnly, crossed: false},
	} {
		name := "policy-" + tc.policy
		if tc.policy == "" {
			name = "policy-default"
		}
		t.Run(name, func(t *testing.T) {
			var params map[string]string
			if tc.policy != "" {
				params = map[string]string{volume.ParamOnDamage: tc.policy}
			}
			id := createVolume(t, td, name, params)
			dir := t.TempDir()
			fillVolume(t, td, id, dir)
			img := filepath.Join(td.dir, "pool", name+".img")
			disk := openFAT16(t, img)
			want := "dirty bit is set"
			if tc.crossed {
				disk.crossLink(t, "B       TXT", firstCluster(t, img, "/A.TXT"))
				want = "shares cluster"
			} else {
				disk.write(t, int64(disk.bs.StateOffset()), []byte{disk.bs.State | ondisk.StateDirty})
			}
			before, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
			_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw})
			if tc.wantFail {
				if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
					t.Fatalf("staging: %v; want FailedPrecondition naming %q", err, want)
				}
				if m := mountsUnder(t, dir); len(m) != 0 {
					t.Errorf("mounted after a failed staging: %v", m)
				}
			} else {
				if err != nil {
					t.Fatalf("staging: %v", err)
				}
				if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
					t.Fatal(err)
				}
				cond := condition(t, td, id, target)
				if !cond.GetAbnormal() || !strings.Contains(cond.GetMessage(), "read-only") || !strings.Contains(cond.GetMessage(), want) {
					t.Errorf("condition: %v; want abnormal, read-only, naming %q", cond, want)
				}
				if got, err := os.ReadFile(filepath.Join(target, "A.TXT")); err != nil || !bytes.Equal(got, damageFiles["A.TXT"]) {
					t.Errorf("reading A.TXT: %d bytes, %v", len(got), err)
				}
				if err := os.WriteFile(filepath.Join(target, "NEW.TXT"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
					t.Errorf("writing to the damaged volume: %v, want EROFS", err)
				}
				unpublishAndUnstage(t, td, id, dir)
			}
			after, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Error("the image changed")
			}
		})
	}
}

// TestStagingUSBVolume: the check runs for the USB pool too. A stick left dirty with a lost
// chain is repaired and served; once cross-linked, a volume with onDamage=fail is refused with
// FailedPrecondition and the stick is left as it was.
func TestStagingUSBVolume(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	stick := fake.Add(t, 32<<20, "Fake", "Damaged", "DAMAGE01")
	td := startDriver(t, "", withUSB(fake))
	ctx := context.Background()
	vol, err := usbVolume(t, td, "stick", 1, map[string]string{volume.ParamFATType: "16", volume.ParamOnDamage: volume.OnDamageFail})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolumeId()
	dir := t.TempDir()
	fillVolume(t, td, id, dir)

	disk := openFAT16(t, stick.Loop)
	lost := disk.crashLeftovers(t)
	target := stageAndPublish(t, td, id, dir)
	if v := disk.fat(t, 0, lost[0]); v != 0 {
		t.Errorf("lost cluster %d is 0x%04x after staging; want it freed", lost[0], v)
	}
	if cond := condition(t, td, id, target); cond.GetAbnormal() {
		t.Errorf("condition after the repair: %v", cond)
	}
	checkFiles(t, target)
	unpublishAndUnstage(t, td, id, dir)
	if clean, out := fsckClean(t, stick.Loop); !clean {
		t.Fatalf("fsck.fat -n after unstaging:\n%s", out)
	}

	disk.crossLink(t, "B       TXT", firstCluster(t, stick.Loop, "/A.TXT"))
	before := disk.read(t, 0, 32<<20)
	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: filepath.Join(dir, "staging"), VolumeCapability: rw})
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "shares cluster") {
		t.Fatalf("staging the cross-linked stick: %v; want FailedPrecondition naming the shared cluster", err)
	}
	if !bytes.Equal(before, disk.read(t, 0, 32<<20)) {
		t.Error("the stick changed")
	}
}

// TestDamageFoundWhileServing: damage the staging check could not see (made on the disk after
// the volume was staged, in a directory the engine had not read yet) turns the volume read-only
// when the engine meets it, and the volume condition names it.
func TestDamageFoundWhileServing(t *testing.T) {
	requireFUSE(t)
	testenv.RequireTool(t, "mshowfat")
	td := startDriver(t, "", nil)
	id := createVolume(t, td, "served", nil)
	dir := t.TempDir()
	target := stageAndPublish(t, td, id, dir)
	if err := os.Mkdir(filepath.Join(target, "D"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range damageFiles {
		if err := os.WriteFile(filepath.Join(target, "D", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unpublishAndUnstage(t, td, id, dir)
	img := filepath.Join(td.dir, "pool", "served.img")
	cluster := firstCluster(t, img, "/D/A.TXT")
	disk := openFAT16(t, img)
	subdir := disk.g.ClusterOffset(firstCluster(t, img, "/D"))

	// Nothing may read D between staging and the damage (NodeGetVolumeStats' inode count walks
	// the tree).
	target = stageAndPublish(t, td, id, dir)
	// B.TXT's entry in D now starts on A.TXT's first cluster.
	entries := disk.read(t, subdir, disk.g.ClusterSize)
	found := false
	for off := 0; off < len(entries); off += ondisk.DirEntrySize {
		if string(entries[off:off+11]) == "B       TXT" {
			var b [2]byte
			binary.LittleEndian.PutUint16(b[:], uint16(cluster))
			disk.write(t, subdir+int64(off)+26, b[:])
			found = true
		}
	}
	if !found {
		t.Fatal("no entry B.TXT in D")
	}
	_, errA := os.ReadFile(filepath.Join(target, "D", "A.TXT"))
	_, errB := os.ReadFile(filepath.Join(target, "D", "B.TXT"))
	if errA == nil && errB == nil {
		t.Fatal("both files read whole from a cross-linked directory")
	}
	if err := os.WriteFile(filepath.Join(target, "NEW.TXT"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing after the damage was found: %v, want EROFS", err)
	}
	cond := condition(t, td, id, target)
	if !cond.GetAbnormal() || !strings.Contains(cond.GetMessage(), "damage found while serving") {
		t.Errorf("condition after the damage: %v; want abnormal, naming the damage", cond)
	}
	unpublishAndUnstage(t, td, id, dir)
}
