package driver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

func requireLoop(t *testing.T) {
	t.Helper()
	requireFUSE(t)
	testenv.RequireLoop(t)
	testenv.RequireTool(t, "mkfs.fat", "fsck.fat", "mcopy", "mtype", "mdir")
}

// run runs a tool and returns its standard output; mtools warn on stderr about the geometry
// of loop devices, which is no error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", name, args, err, out, stderr.String())
	}
	return string(out)
}

// stageAndPublish stages and publishes a volume under dir and returns the target path.
func stageAndPublish(t *testing.T, td *testDriver, id, dir string) string {
	t.Helper()
	ctx := context.Background()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	return target
}

func unpublishAndUnstage(t *testing.T, td *testDriver, id, dir string) {
	t.Helper()
	ctx := context.Background()
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: filepath.Join(dir, "target")}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: filepath.Join(dir, "staging")}); err != nil {
		t.Fatal(err)
	}
}

func usbVolume(t *testing.T, td *testDriver, name string, required int64, params map[string]string) (*csi.Volume, error) {
	t.Helper()
	p := map[string]string{volume.ParamPool: volume.PoolUSB}
	for k, v := range params {
		p[k] = v
	}
	resp, err := td.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: required}, Parameters: p})
	return resp.GetVolume(), err
}

// TestUSBAdoptAndReclaim: a stick with files made by mkfs.fat and mtools is adopted with its
// files; released with reclaim=keep it keeps them and can be adopted again; released with
// reclaim=wipe it holds an empty, clean file system; a stick without a FAT cannot be adopted.
// The smallest stick that fits is the one claimed, and GetCapacity reports the largest free one.
func TestUSBAdoptAndReclaim(t *testing.T) { testUSBAdoptAndReclaim(t, nil) }

func testUSBAdoptAndReclaim(t *testing.T, mode func(*Config)) {
	requireLoop(t)
	fake := usbtest.New(t)
	small := fake.Add(t, 48<<20, "Fake", "Small", "ADOPT0001")
	big := fake.Add(t, 96<<20, "Fake", "Big", "ADOPT0002")
	td := startDriver(t, "", all(withUSB(fake), mode))
	ctx := context.Background()

	capResp, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{volume.ParamPool: volume.PoolUSB}})
	if err != nil || capResp.GetAvailableCapacity() != big.Size {
		t.Fatalf("GetCapacity(usb) = %v, %v; want the big stick's %d bytes", capResp, err, big.Size)
	}
	// Neither stick has a FAT yet: adopting finds nothing.
	if _, err := usbVolume(t, td, "adopt-nothing", 1, map[string]string{volume.ParamAdopt: "true"}); code(err) != codes.ResourceExhausted {
		t.Fatalf("adopting blank sticks: %v, want ResourceExhausted", err)
	}

	run(t, "mkfs.fat", "-n", "FIELD", small.Loop)
	note := filepath.Join(t.TempDir(), "note.txt")
	if err := os.WriteFile(note, []byte("from the field\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "mcopy", "-i", small.Loop, note, "::/NOTE.TXT")

	vol, err := usbVolume(t, td, "adopted", 1, map[string]string{volume.ParamAdopt: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if vol.GetCapacityBytes() != small.Size {
		t.Fatalf("adopted volume has %d bytes, want the small stick's %d", vol.GetCapacityBytes(), small.Size)
	}
	dir := t.TempDir()
	target := stageAndPublish(t, td, vol.GetVolumeId(), dir)
	got, err := os.ReadFile(filepath.Join(target, "NOTE.TXT"))
	if err != nil || string(got) != "from the field\n" {
		t.Fatalf("adopted file reads %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(target, "added.txt"), []byte("added by a pod\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unpublishAndUnstage(t, td, vol.GetVolumeId(), dir)
	if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	// reclaim=keep (the default): the files are still on the stick.
	run(t, "fsck.fat", "-n", small.Loop)
	if out := run(t, "mtype", "-i", small.Loop, "::/added.txt"); out != "added by a pod\n" {
		t.Fatalf("after release with keep, mtype added.txt = %q", out)
	}

	// Adopt again, this time to be wiped on release.
	vol, err = usbVolume(t, td, "adopted-again", 1, map[string]string{volume.ParamAdopt: "true", volume.ParamReclaim: volume.ReclaimWipe})
	if err != nil {
		t.Fatal(err)
	}
	target = stageAndPublish(t, td, vol.GetVolumeId(), dir)
	if got, err := os.ReadFile(filepath.Join(target, "added.txt")); err != nil || string(got) != "added by a pod\n" {
		t.Fatalf("re-adopted file reads %q, %v", got, err)
	}
	unpublishAndUnstage(t, td, vol.GetVolumeId(), dir)
	if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	run(t, "fsck.fat", "-n", small.Loop)
	if out := run(t, "mdir", "-b", "-i", small.Loop, "::/"); strings.TrimSpace(out) != "" {
		t.Fatalf("after wipe the root directory lists %q", out)
	}

	// Without adopt the smallest stick that fits is formatted; a size only the big one has
	// takes the big one, and then nothing is left.
	v1, err := usbVolume(t, td, "fresh-small", 40<<20, map[string]string{volume.ParamLabel: "fresh"})
	if err != nil || v1.GetCapacityBytes() != small.Size {
		t.Fatalf("fresh-small: %v, %v; want the small stick", v1, err)
	}
	v2, err := usbVolume(t, td, "fresh-big", 40<<20, nil)
	if err != nil || v2.GetCapacityBytes() != big.Size {
		t.Fatalf("fresh-big: %v, %v; want the big stick", v2, err)
	}
	if _, err := usbVolume(t, td, "one-too-many", 1, nil); code(err) != codes.ResourceExhausted {
		t.Fatalf("third volume on two sticks: %v, want ResourceExhausted", err)
	}
	if out := run(t, "mlabel", "-s", "-i", small.Loop, "::"); !strings.Contains(out, "FRESH") {
		t.Errorf("mlabel -s on the formatted stick: %q, want FRESH", out)
	}
	run(t, "fsck.fat", "-n", big.Loop)
	capResp, err = td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{volume.ParamPool: volume.PoolUSB}})
	if err != nil || capResp.GetAvailableCapacity() != 0 {
		t.Fatalf("GetCapacity with every stick claimed = %v, %v; want 0", capResp, err)
	}
}

// TestUSBFilters: allow and deny lists by vendor, model, serial and by-id name decide which
// sticks the pool may claim.
func TestUSBFilters(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	fake.Add(t, 32<<20, "Acme", "Stick", "AAA1")
	other := fake.Add(t, 40<<20, "Other", "Card", "BBB2")
	tests := []struct {
		name  string
		set   func(*media.Config)
		wantN int64 // capacity: the largest allowed stick, 0 for none
	}{
		{"no lists", func(*media.Config) {}, other.Size},
		{"deny vendor", func(u *media.Config) { u.DenyVendors = []string{"Other"} }, 32 << 20},
		{"allow model", func(u *media.Config) { u.AllowModels = []string{"Sti*"} }, 32 << 20},
		{"allow serial", func(u *media.Config) { u.AllowSerials = []string{"BBB2"} }, other.Size},
		{"allow by-id", func(u *media.Config) { u.AllowByID = []string{"usb-Acme_*"} }, 32 << 20},
		{"deny by-id wins over allow", func(u *media.Config) {
			u.AllowVendors = []string{"*"}
			u.DenyByID = []string{"usb-*"}
		}, 0},
		{"allow matches nothing", func(u *media.Config) { u.AllowVendors = []string{"Nobody"} }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			td := startDriver(t, "", func(c *Config) {
				withUSB(fake)(c)
				tt.set(c.Node.USB)
			})
			resp, err := td.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{Parameters: map[string]string{volume.ParamPool: volume.PoolUSB}})
			if err != nil || resp.GetAvailableCapacity() != tt.wantN {
				t.Fatalf("GetCapacity = %v, %v; want %d", resp, err, tt.wantN)
			}
		})
	}
}

// TestUSBVanishes: a stick pulled out while its volume is staged turns the volume's condition
// abnormal; staging it again fails until it is back.
func TestUSBVanishes(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	stick := fake.Add(t, 32<<20, "Fake", "Stick", "GONE0001")
	td := startDriver(t, "", withUSB(fake))
	ctx := context.Background()
	vol, err := usbVolume(t, td, "pulled", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	target := stageAndPublish(t, td, vol.GetVolumeId(), dir)
	stats, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol.GetVolumeId(), VolumePath: target})
	if err != nil || stats.GetVolumeCondition().GetAbnormal() {
		t.Fatalf("stats before the stick is pulled: %v, %v", stats, err)
	}
	fake.Unplug(t, stick)
	stats, err = td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol.GetVolumeId(), VolumePath: target})
	if err != nil || !stats.GetVolumeCondition().GetAbnormal() || !strings.Contains(stats.GetVolumeCondition().GetMessage(), stick.ByID) {
		t.Fatalf("stats after the stick is pulled: %v, %v; want an abnormal condition naming %s", stats, err, stick.ByID)
	}
	unpublishAndUnstage(t, td, vol.GetVolumeId(), dir)
	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol.GetVolumeId(), StagingTargetPath: filepath.Join(dir, "staging"), VolumeCapability: rw})
	if code(err) != codes.FailedPrecondition {
		t.Fatalf("staging a volume whose stick is gone: %v, want FailedPrecondition", err)
	}
}

// TestUSBAdoptRefusesDamaged: a stick whose file system fsck.fat -n finds in need of repair (here
// the dirty bit of a volume not cleanly unmounted) is not adopted; once fsck.fat -a repairs it,
// it is.
func TestUSBAdoptRefusesDamaged(t *testing.T) { testUSBAdoptRefusesDamaged(t, nil) }

func testUSBAdoptRefusesDamaged(t *testing.T, mode func(*Config)) {
	requireLoop(t)
	fake := usbtest.New(t)
	stick := fake.Add(t, 32<<20, "Fake", "Dirty", "DIRTY001")
	run(t, "mkfs.fat", "-F", "16", stick.Loop)
	// FAT16's state byte is at offset 37; bit 0 is Linux's dirty bit.
	f, err := os.OpenFile(stick.Loop, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x01}, 37); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := exec.Command("fsck.fat", "-n", stick.Loop).Run(); err == nil {
		t.Fatalf("fsck.fat -n finds nothing wrong with the dirty stick; the test needs a volume it would repair")
	}
	td := startDriver(t, "", all(withUSB(fake), mode))
	_, err = usbVolume(t, td, "dirty", 1, map[string]string{volume.ParamAdopt: "true"})
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "repair") {
		t.Fatalf("adopting a dirty stick: %v, want ResourceExhausted saying it needs repair", err)
	}
	exec.Command("fsck.fat", "-a", stick.Loop).Run()
	run(t, "fsck.fat", "-n", stick.Loop)
	if _, err := usbVolume(t, td, "dirty", 1, map[string]string{volume.ParamAdopt: "true"}); err != nil {
		t.Fatalf("adopting the repaired stick: %v", err)
	}
}
