package driver

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"
)

// treeDigest describes every file and directory under dir by path, mode, size, time and (for
// small files such as the state) content, so a test can tell whether a refused request changed
// anything there.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSocket != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d", p, info.Mode(), info.Size(), info.ModTime().UnixNano())
		if d.Type().IsRegular() && info.Size() < 1<<20 {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestHostileRequests sends the real gRPC server, one request at a time, what a confused or
// hostile caller might: missing and malformed fields, paths that reach into the driver's own
// directories, capabilities it does not offer, and repeats that contradict what was done. Each
// gets the code the CSI spec names for it, and none changes the pool, the state or the mounts.
// (TestBadCreateVolume, TestBadVolumeIDs and TestBadNodeRequests cover names, IDs, sizes,
// parameters and the order of node calls; this table adds what they leave out.)
func TestHostileRequests(t *testing.T) {
	requireFUSE(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()
	pool, state := filepath.Join(td.dir, "pool"), filepath.Join(td.dir, "state")
	create := func(name string) string {
		resp, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rw},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetVolume().GetVolumeId()
	}
	idle := create("idle")     // created, never staged
	staged := create("staged") // staged read-only
	ro := mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)
	stagedAt := filepath.Join(td.dir, "staged-staging")
	if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: staged, StagingTargetPath: stagedAt, VolumeCapability: ro}); err != nil {
		t.Fatal(err)
	}
	staging, target := filepath.Join(td.dir, "staging"), filepath.Join(td.dir, "target")
	noMode := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
	noType := &csi.VolumeCapability{AccessMode: rw.AccessMode}
	unknownMode := mountCap(csi.VolumeCapability_AccessMode_UNKNOWN)
	multiSingle := mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)
	block := &csi.VolumeCapability{AccessMode: rw.AccessMode, AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	createReq := func(mod func(*csi.CreateVolumeRequest)) *csi.CreateVolumeRequest {
		r := &csi.CreateVolumeRequest{Name: "fresh", VolumeCapabilities: []*csi.VolumeCapability{rw}}
		mod(r)
		return r
	}
	stage := func(id, path string, c *csi.VolumeCapability) error {
		_, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: path, VolumeCapability: c})
		return err
	}
	publish := func(id, from, to string, c *csi.VolumeCapability, readOnly bool) error {
		_, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: from, TargetPath: to, VolumeCapability: c, Readonly: readOnly})
		return err
	}
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		// CreateVolume: sizes, capabilities and parameters the other table leaves out.
		{"create: negative limit", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.CapacityRange = &csi.CapacityRange{LimitBytes: -1} }))
			return err
		}, codes.InvalidArgument},
		{"create: a 1-byte limit", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) {
				r.CapacityRange = &csi.CapacityRange{RequiredBytes: 1, LimitBytes: 1}
			}))
			return err
		}, codes.OutOfRange},
		{"create: no access mode", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = []*csi.VolumeCapability{noMode} }))
			return err
		}, codes.InvalidArgument},
		{"create: unknown access mode", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = []*csi.VolumeCapability{unknownMode} }))
			return err
		}, codes.InvalidArgument},
		{"create: no access type", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = []*csi.VolumeCapability{noType} }))
			return err
		}, codes.InvalidArgument},
		{"create: multi-node single writer", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = []*csi.VolumeCapability{multiSingle} }))
			return err
		}, codes.InvalidArgument},
		{"create: nil capability in the list", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = []*csi.VolumeCapability{rw, nil} }))
			return err
		}, codes.InvalidArgument},
		{"create: unknown pool", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{"pool": "../tape"} }))
			return err
		}, codes.InvalidArgument},
		{"create: no FAT copies", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{"fats": "0"} }))
			return err
		}, codes.InvalidArgument},
		{"create: five FAT copies", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{"fats": "5"} }))
			return err
		}, codes.InvalidArgument},
		{"create: cluster size too large", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{"clusterSize": "128K"} }))
			return err
		}, codes.InvalidArgument},
		{"create: label with a character FAT forbids", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{"label": "A*B"} }))
			return err
		}, codes.InvalidArgument},
		{"create: reclaim on the image pool", func() error {
			_, err := td.ctrl.CreateVolume(ctx, createReq(func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{"reclaim": "wipe"} }))
			return err
		}, codes.InvalidArgument},
		{"create: existing name, another write mode", func() error {
			_, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "idle", VolumeCapabilities: []*csi.VolumeCapability{rw},
				CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}, Parameters: map[string]string{"mode": "sync"}})
			return err
		}, codes.AlreadyExists},
		{"create: existing name, larger than it was made", func() error {
			_, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "idle", VolumeCapabilities: []*csi.VolumeCapability{rw},
				CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
			return err
		}, codes.AlreadyExists},

		// ValidateVolumeCapabilities and GetCapacity.
		{"validate: no capabilities", func() error {
			_, err := td.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: idle})
			return err
		}, codes.InvalidArgument},
		{"capacity: unknown parameter", func() error {
			_, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"fstype": "vfat"}})
			return err
		}, codes.InvalidArgument},

		// NodeStageVolume.
		{"stage: no capability", func() error { return stage(idle, staging, nil) }, codes.InvalidArgument},
		{"stage: no access mode", func() error { return stage(idle, staging, noMode) }, codes.InvalidArgument},
		{"stage: no access type", func() error { return stage(idle, staging, noType) }, codes.InvalidArgument},
		{"stage: unknown access mode", func() error { return stage(idle, staging, unknownMode) }, codes.InvalidArgument},
		{"stage: multi-node single writer", func() error { return stage(idle, staging, multiSingle) }, codes.InvalidArgument},
		{"stage: no staging path", func() error { return stage(idle, "", rw) }, codes.InvalidArgument},
		{"stage: NUL in the staging path", func() error { return stage(idle, staging+"\x00x", rw) }, codes.InvalidArgument},
		{"stage: relative staging path with dot-dot", func() error { return stage(idle, "../../staging", rw) }, codes.InvalidArgument},
		{"stage: at the pool directory", func() error { return stage(idle, pool, rw) }, codes.InvalidArgument},
		{"stage: inside the pool directory", func() error { return stage(idle, filepath.Join(pool, "mnt"), rw) }, codes.InvalidArgument},
		{"stage: at the state directory", func() error { return stage(idle, state, rw) }, codes.InvalidArgument},
		{"stage: above the pool directory", func() error { return stage(idle, td.dir, rw) }, codes.InvalidArgument},
		{"stage: the pool by a dot-dot path", func() error { return stage(idle, filepath.Join(td.dir, "x", "..", "pool"), rw) }, codes.InvalidArgument},
		{"stage: where another volume is staged", func() error { return stage(idle, stagedAt, rw) }, codes.FailedPrecondition},
		{"stage again: read-write over read-only", func() error { return stage(staged, stagedAt, rw) }, codes.AlreadyExists},
		{"stage again: other mount flags", func() error {
			return stage(staged, stagedAt, mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, "flush"))
		}, codes.AlreadyExists},

		// NodePublishVolume.
		{"publish: no target path", func() error { return publish(staged, stagedAt, "", ro, true) }, codes.InvalidArgument},
		{"publish: relative target path", func() error { return publish(staged, stagedAt, "target", ro, true) }, codes.InvalidArgument},
		{"publish: no staging path", func() error { return publish(staged, "", target, ro, true) }, codes.InvalidArgument},
		{"publish: no capability", func() error { return publish(staged, stagedAt, target, nil, true) }, codes.InvalidArgument},
		{"publish: block", func() error { return publish(staged, stagedAt, target, block, true) }, codes.InvalidArgument},
		{"publish: multi-node", func() error { return publish(staged, stagedAt, target, multiSingle, true) }, codes.InvalidArgument},
		{"publish: target inside the pool", func() error { return publish(staged, stagedAt, filepath.Join(pool, "t"), ro, true) }, codes.InvalidArgument},
		{"publish: target is the state directory", func() error { return publish(staged, stagedAt, state, ro, true) }, codes.InvalidArgument},
		{"publish: target is the staging path", func() error { return publish(staged, stagedAt, stagedAt, ro, true) }, codes.InvalidArgument},
		{"publish: target inside the staging path", func() error { return publish(staged, stagedAt, filepath.Join(stagedAt, "T"), ro, true) }, codes.InvalidArgument},
		{"publish: before stage", func() error { return publish(idle, staging, target, rw, false) }, codes.FailedPrecondition},
		{"publish: read-write from a read-only stage", func() error { return publish(staged, stagedAt, target, rw, false) }, codes.FailedPrecondition},
		{"publish: staged elsewhere", func() error { return publish(staged, staging, target, ro, true) }, codes.FailedPrecondition},

		// Unpublish, unstage, stats, expansion.
		{"unpublish: no target path", func() error {
			_, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: staged})
			return err
		}, codes.InvalidArgument},
		{"unpublish: relative target path", func() error {
			_, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: staged, TargetPath: "target"})
			return err
		}, codes.InvalidArgument},
		{"unpublish: no volume ID", func() error {
			_, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: target})
			return err
		}, codes.InvalidArgument},
		{"unpublish: the staging path as a target", func() error {
			_, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: staged, TargetPath: stagedAt})
			return err
		}, codes.InvalidArgument},
		{"unpublish: the pool as a target", func() error {
			_, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: staged, TargetPath: pool})
			return err
		}, codes.InvalidArgument},
		{"unstage: no staging path", func() error {
			_, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: staged})
			return err
		}, codes.InvalidArgument},
		{"unstage: relative staging path", func() error {
			_, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: staged, StagingTargetPath: "staged-staging"})
			return err
		}, codes.InvalidArgument},
		{"unstage: the pool as a staging path", func() error {
			_, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: idle, StagingTargetPath: pool})
			return err
		}, codes.InvalidArgument},
		{"stats: no path", func() error {
			_, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: staged})
			return err
		}, codes.InvalidArgument},
		{"stats: the pool", func() error {
			_, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: staged, VolumePath: pool})
			return err
		}, codes.NotFound},
		{"expand: no volume path", func() error {
			_, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: staged})
			return err
		}, codes.InvalidArgument},
		{"expand: the pool as a volume path", func() error {
			_, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: staged, VolumePath: pool})
			return err
		}, codes.NotFound},
		{"expand: past the image's size", func() error {
			_, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: staged, VolumePath: stagedAt,
				CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 40}})
			return err
		}, codes.OutOfRange},
		{"expand: a read-only staging that fills its image already", func() error {
			_, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: staged, VolumePath: stagedAt})
			return err
		}, codes.OK},
		{"controller expand: a limit below the size", func() error {
			_, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: staged,
				CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20, LimitBytes: 2 << 20}})
			return err
		}, codes.OutOfRange},
		{"controller publish: not offered", func() error {
			_, err := td.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: staged, NodeId: testNode, VolumeCapability: rw})
			return err
		}, codes.Unimplemented},
	}
	digest := func() string {
		mounts := mountsUnder(t, td.dir)
		slices.Sort(mounts)
		return treeDigest(t, pool) + treeDigest(t, state) + strings.Join(mounts, "\n")
	}
	before := digest()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			within(t, tt.name, func() { err = tt.call() })
			if code(err) != tt.want {
				t.Errorf("%v, want code %v", err, tt.want)
			}
			if after := digest(); after != before {
				t.Fatalf("the request changed the pool, the state or the mounts:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			for _, p := range []string{staging, target, filepath.Join(pool, "mnt"), filepath.Join(pool, "t"), filepath.Join(stagedAt, "T")} {
				if _, err := os.Lstat(p); err == nil {
					t.Fatalf("the request made %s", p)
				}
			}
		})
	}
	// The staged volume still works after all that.
	if err := publish(staged, stagedAt, target, ro, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(target); err != nil {
		t.Fatalf("reading the published volume: %v", err)
	}
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: staged, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: staged, StagingTargetPath: stagedAt}); err != nil {
		t.Fatal(err)
	}
}

// TestHostileUSBRequests: CreateVolume requests the USB pool cannot or must not satisfy get their
// codes and leave the sticks untouched (no stick is claimed or formatted).
func TestHostileUSBRequests(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	stick := fake.Add(t, 32<<20, "Fake", "Hostile", "HOST0001")
	td := startDriver(t, "", withUSB(fake))
	ctx := context.Background()
	tests := []struct {
		name     string
		required int64
		limit    int64
		params   map[string]string
		want     codes.Code
	}{
		{"larger than any stick", 64 << 20, 0, nil, codes.ResourceExhausted},
		{"limit below every stick", 1, 16 << 20, nil, codes.ResourceExhausted},
		{"negative size", -1, 0, nil, codes.InvalidArgument},
		{"adopt not a boolean", 1, 0, map[string]string{"adopt": "maybe"}, codes.InvalidArgument},
		{"unknown reclaim", 1, 0, map[string]string{"reclaim": "burn"}, codes.InvalidArgument},
		{"adopt a stick with no FAT", 1, 0, map[string]string{"adopt": "true"}, codes.ResourceExhausted},
	}
	digest := func() string { return treeDigest(t, filepath.Dir(stick.SysDir)) + stickDigest(t, stick.Loop) }
	before := digest()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := map[string]string{volume.ParamPool: volume.PoolUSB}
			for k, v := range tt.params {
				p[k] = v
			}
			_, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "usb-" + strings.ReplaceAll(tt.name, " ", "-"),
				VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: &csi.CapacityRange{RequiredBytes: tt.required, LimitBytes: tt.limit}, Parameters: p})
			if code(err) != tt.want {
				t.Errorf("%v, want code %v", err, tt.want)
			}
			if after := digest(); after != before {
				t.Fatalf("the request changed the stick or its sysfs entry")
			}
		})
	}
	// The stick is still free: a plain request claims it.
	if _, err := usbVolume(t, td, "plain", 1, nil); err != nil {
		t.Fatalf("claiming the stick after the refused requests: %v", err)
	}
}

// stickDigest hashes a stick's first MiB, where a format would write its boot sector and FATs.
func stickDigest(t *testing.T, dev string) string {
	t.Helper()
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(buf))
}
