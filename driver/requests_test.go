package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-fat/csi-fat/node/volume"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	rw       = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	rwSingle = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
)

func code(err error) codes.Code { return status.Code(err) }

// poolFiles lists what the image pool directory holds.
func poolFiles(t *testing.T, td *testDriver) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(td.dir, "pool"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// poolFree is the free space of the pool's file system, by statfs.
func poolFree(t *testing.T, td *testDriver) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(td.dir, "pool"), &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// TestBadCreateVolume: every malformed or unsatisfiable CreateVolume gets the code the CSI spec
// names, and leaves nothing behind in the pool.
func TestBadCreateVolume(t *testing.T) {
	td := startDriver(t, "", nil)
	ctx := context.Background()
	// An existing volume for the AlreadyExists cases.
	if _, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "taken", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}, Parameters: map[string]string{"fatType": "16"}}); err != nil {
		t.Fatal(err)
	}
	block := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	ext4 := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}}
	mib := func(n int64) *csi.CapacityRange { return &csi.CapacityRange{RequiredBytes: n << 20} }
	otherNode := &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{TopologyKey(DefaultDriverName): "node-b"}}}}
	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		want codes.Code
	}{
		{"no name", &csi.CreateVolumeRequest{VolumeCapabilities: []*csi.VolumeCapability{rw}}, codes.InvalidArgument},
		{"dot-dot name", &csi.CreateVolumeRequest{Name: "..", VolumeCapabilities: []*csi.VolumeCapability{rw}}, codes.InvalidArgument},
		{"path in name", &csi.CreateVolumeRequest{Name: "../../etc/passwd", VolumeCapabilities: []*csi.VolumeCapability{rw}}, codes.InvalidArgument},
		{"slash in name", &csi.CreateVolumeRequest{Name: "a/b", VolumeCapabilities: []*csi.VolumeCapability{rw}}, codes.InvalidArgument},
		{"NUL in name", &csi.CreateVolumeRequest{Name: "a\x00b", VolumeCapabilities: []*csi.VolumeCapability{rw}}, codes.InvalidArgument},
		{"hidden name", &csi.CreateVolumeRequest{Name: ".hidden", VolumeCapabilities: []*csi.VolumeCapability{rw}}, codes.InvalidArgument},
		{"overlong name", &csi.CreateVolumeRequest{Name: strings.Repeat("a", 129), VolumeCapabilities: []*csi.VolumeCapability{rw}}, codes.InvalidArgument},
		{"no capabilities", &csi.CreateVolumeRequest{Name: "v"}, codes.InvalidArgument},
		{"block access", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{block}}, codes.InvalidArgument},
		{"ext4", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{ext4}}, codes.InvalidArgument},
		{"multi-node writer", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}}, codes.InvalidArgument},
		{"multi-node reader", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw, mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}}, codes.InvalidArgument},
		{"unknown mount option", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "data=journal")}}, codes.InvalidArgument},
		{"negative size", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: &csi.CapacityRange{RequiredBytes: -1}}, codes.InvalidArgument},
		{"limit below required", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20, LimitBytes: 1 << 20}}, codes.InvalidArgument},
		{"unknown parameter", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, Parameters: map[string]string{"fstype": "vfat"}}, codes.InvalidArgument},
		{"bad fatType", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, Parameters: map[string]string{"fatType": "64"}}, codes.InvalidArgument},
		{"bad clusterSize", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, Parameters: map[string]string{"clusterSize": "3000"}}, codes.InvalidArgument},
		{"bad label", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, Parameters: map[string]string{"label": "MUCH TOO LONG A LABEL"}}, codes.InvalidArgument},
		{"bad mode", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, Parameters: map[string]string{"mode": "async"}}, codes.InvalidArgument},
		{"adopt on image pool", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, Parameters: map[string]string{"adopt": "true"}}, codes.InvalidArgument},
		{"usb pool not enabled", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, Parameters: map[string]string{"pool": "usb"}}, codes.InvalidArgument},
		{"clone of a missing volume", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, VolumeContentSource: &csi.VolumeContentSource{
			Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "image:node-a:no-such-volume"}}}}, codes.NotFound},
		{"another node's topology", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, AccessibilityRequirements: otherNode}, codes.ResourceExhausted},
		{"FAT16 in 8 MiB", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 << 20, LimitBytes: 8 << 20}, Parameters: map[string]string{"fatType": "16"}}, codes.OutOfRange},
		{"FAT12 in 1 GiB", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: mib(1024), Parameters: map[string]string{"fatType": "12"}}, codes.OutOfRange},
		{"no sector between required and limit", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1<<20 + 1, LimitBytes: 1<<20 + 100}}, codes.OutOfRange},
		{"beyond FAT's largest", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: mib(4 << 20)}, codes.OutOfRange},
		{"more than the pool has", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: &csi.CapacityRange{RequiredBytes: poolFree(t, td) + 1<<30}}, codes.ResourceExhausted},
		{"existing name, other size", &csi.CreateVolumeRequest{Name: "taken", VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: mib(32), Parameters: map[string]string{"fatType": "16"}}, codes.AlreadyExists},
		{"existing name, other parameters", &csi.CreateVolumeRequest{Name: "taken", VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: mib(16), Parameters: map[string]string{"fatType": "12"}}, codes.AlreadyExists},
	}
	before := poolFiles(t, td)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := td.ctrl.CreateVolume(ctx, tt.req)
			if code(err) != tt.want {
				t.Fatalf("CreateVolume: %v, want code %v", err, tt.want)
			}
			if after := poolFiles(t, td); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Fatalf("pool changed from %v to %v", before, after)
			}
		})
	}
	// The same request again is no error: idempotent.
	if _, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "taken", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}, Parameters: map[string]string{"fatType": "16"}}); err != nil {
		t.Fatalf("repeating the request: %v", err)
	}
}

// TestBadVolumeIDs: hostile, malformed and foreign volume IDs in every call that takes one. An
// ID this driver could never have issued names a volume that does not exist, so every call
// answers what the spec says for a missing volume (NotFound; DeleteVolume OK), and nothing is
// made or removed on its account.
func TestBadVolumeIDs(t *testing.T) {
	td := startDriver(t, "", nil)
	ctx := context.Background()
	staging := filepath.Join(td.dir, "staging")
	target := filepath.Join(td.dir, "target")
	ids := []struct {
		id               string
		want, wantDelete codes.Code
	}{
		{"", codes.InvalidArgument, codes.InvalidArgument}, // a required field is missing
		{"image:node-a:..", codes.NotFound, codes.OK},
		{"image:node-a:../../etc", codes.NotFound, codes.OK},
		{"image:node-a:a/b", codes.NotFound, codes.OK},
		{"image:node-a:a\x00b", codes.NotFound, codes.OK},
		{"image:node-a:" + strings.Repeat("x", volume.MaxNameLength+1), codes.NotFound, codes.OK},
		{strings.Repeat("y", volume.MaxVolumeIDLength+1), codes.NotFound, codes.OK},
		{"image:../node:v", codes.NotFound, codes.OK},
		{"tape:node-a:v", codes.NotFound, codes.OK},
		{"image:node-a", codes.NotFound, codes.OK},
		{"image:node-a:v:extra", codes.NotFound, codes.OK},
		{"fake-vol-id-0123456789", codes.NotFound, codes.OK}, // csi-sanity's default
		{"/etc/passwd", codes.NotFound, codes.OK},
		// Another node's volume may exist there: deleting it here must not pretend to succeed.
		{"image:node-b:v", codes.NotFound, codes.InvalidArgument},
		{"image:node-a:never-made", codes.NotFound, codes.OK},
	}
	for _, tt := range ids {
		if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: tt.id, StagingTargetPath: staging, VolumeCapability: rw}); code(err) != tt.want {
			t.Errorf("NodeStageVolume(%q): %v, want %v", tt.id, err, tt.want)
		}
		if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: tt.id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); code(err) != tt.want {
			t.Errorf("NodePublishVolume(%q): %v, want %v", tt.id, err, tt.want)
		}
		if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: tt.id, TargetPath: target}); code(err) != tt.want {
			t.Errorf("NodeUnpublishVolume(%q): %v, want %v", tt.id, err, tt.want)
		}
		if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: tt.id, StagingTargetPath: staging}); code(err) != tt.want {
			t.Errorf("NodeUnstageVolume(%q): %v, want %v", tt.id, err, tt.want)
		}
		if _, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: tt.id, VolumePath: target}); code(err) != tt.want {
			t.Errorf("NodeGetVolumeStats(%q): %v, want %v", tt.id, err, tt.want)
		}
		if _, err := td.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: tt.id, VolumeCapabilities: []*csi.VolumeCapability{rw}}); code(err) != tt.want {
			t.Errorf("ValidateVolumeCapabilities(%q): %v, want %v", tt.id, err, tt.want)
		}
		if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: tt.id}); code(err) != tt.wantDelete {
			t.Errorf("DeleteVolume(%q): %v, want %v", tt.id, err, tt.wantDelete)
		}
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("a refused NodeStageVolume made %s: %v", staging, err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("a refused NodePublishVolume made %s: %v", target, err)
	}
	// A directory left at a target with no record (a publish that failed half way) is cleaned
	// up by NodeUnpublishVolume whatever the ID, so kubelet's clean-up is not stuck on it.
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "fake-vol-id-0123456789", TargetPath: target}); err != nil {
		t.Errorf("NodeUnpublishVolume of a leftover target: %v", err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("the leftover target remains: %v", err)
	}
}

// TestForeignIDKeepsVolumes: an ID that names a real volume's name under another pool, another
// node or a mangled form reaches neither the volume nor its image: the volume stays staged,
// published and listed, its image in the pool.
func TestForeignIDKeepsVolumes(t *testing.T) {
	requireFUSE(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()
	vol, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	staging := filepath.Join(td.dir, "staging")
	target := filepath.Join(td.dir, "target")
	if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"usb:node-a:v", "image:node-b:v", "v", "image:node-a:v:", "image:node-a:./v"} {
		if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: other, TargetPath: target}); code(err) != codes.NotFound {
			t.Errorf("NodeUnpublishVolume(%q): %v, want NotFound", other, err)
		}
		if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: other, StagingTargetPath: staging}); code(err) != codes.NotFound {
			t.Errorf("NodeUnstageVolume(%q): %v, want NotFound", other, err)
		}
		if _, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: other, VolumePath: target}); code(err) != codes.NotFound {
			t.Errorf("NodeGetVolumeStats(%q): %v, want NotFound", other, err)
		}
		td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: other})
	}
	if _, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target}); err != nil {
		t.Errorf("the volume after foreign IDs: %v", err)
	}
	if files := poolFiles(t, td); len(files) != 1 || files[0] != "v.img" {
		t.Errorf("pool holds %v, want [v.img]", files)
	}
	if err := os.WriteFile(filepath.Join(target, "STILL.TXT"), []byte("here"), 0o644); err != nil {
		t.Errorf("the target after foreign IDs: %v", err)
	}
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
}

// TestBadNodeRequests: node calls on a real volume with wrong paths, capabilities and order.
func TestBadNodeRequests(t *testing.T) {
	requireFUSE(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()
	vol, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwSingle},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	staging := filepath.Join(td.dir, "staging")
	target := filepath.Join(td.dir, "target")
	block := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	ro := mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)

	check := func(what string, err error, want codes.Code) {
		t.Helper()
		if code(err) != want {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	_, err = td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rwSingle})
	check("publish before stage", err, codes.FailedPrecondition)
	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: "relative/path", VolumeCapability: rwSingle})
	check("relative staging path", err, codes.InvalidArgument)
	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: block})
	check("stage block", err, codes.InvalidArgument)
	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)})
	check("stage multi-node", err, codes.InvalidArgument)
	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		VolumeCapability: &csi.VolumeCapability{AccessMode: rwSingle.AccessMode, AccessType: &csi.VolumeCapability_Mount{
			Mount: &csi.VolumeCapability_MountVolume{VolumeMountGroup: "wheel"}}}})
	check("non-numeric mount group", err, codes.InvalidArgument)

	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rwSingle})
	check("stage", err, codes.OK)
	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rwSingle})
	check("stage again", err, codes.OK)
	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: ro})
	check("stage again read-only", err, codes.AlreadyExists)
	_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging + "2", VolumeCapability: rwSingle})
	check("stage at a second path", err, codes.FailedPrecondition)
	_, err = td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging + "2", TargetPath: target, VolumeCapability: rwSingle})
	check("publish from the wrong staging path", err, codes.FailedPrecondition)
	_, err = td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rwSingle})
	check("publish", err, codes.OK)
	_, err = td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rwSingle})
	check("publish again", err, codes.OK)
	_, err = td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rwSingle, Readonly: true})
	check("publish again read-only", err, codes.AlreadyExists)
	_, err = td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target + "2", VolumeCapability: rwSingle})
	check("second writer of a single-writer volume", err, codes.FailedPrecondition)
	_, err = td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: td.dir})
	check("stats at a path the volume is not at", err, codes.NotFound)
	_, err = td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	check("unstage while published", err, codes.FailedPrecondition)
	_, err = td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	check("delete while staged", err, codes.FailedPrecondition)

	for i := 0; i < 2; i++ {
		_, err = td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
		check("unpublish", err, codes.OK)
		_, err = td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
		check("unstage", err, codes.OK)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target %s remains after unpublish: %v", target, err)
	}
	if mounts := mountsUnder(t, td.dir); len(mounts) > 0 {
		t.Errorf("mounts remain after unstage: %v", mounts)
	}
	_, err = td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	check("delete", err, codes.OK)
	_, err = td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	check("delete again", err, codes.OK)
	if files := poolFiles(t, td); len(files) != 0 {
		t.Errorf("pool holds %v after delete", files)
	}
}
