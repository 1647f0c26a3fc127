package driver

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// TestAccessModes: the spec's table of second NodePublishVolume calls for a plugin with the
// SINGLE_NODE_MULTI_WRITER capability, on real mounts. SINGLE_NODE_MULTI_WRITER is published
// at many targets that share one file system; SINGLE_NODE_SINGLE_WRITER (ReadWriteOncePod) and
// the older single-node modes at one, even read-only; another access mode than the staging's
// is refused, at the same target with AlreadyExists.
func TestAccessModes(t *testing.T) {
	requireFUSE(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()

	ctrlCaps, err := td.ctrl.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ctrlCaps.GetCapabilities(), func(c *csi.ControllerServiceCapability) bool {
		return c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER
	}) {
		t.Error("the controller does not claim SINGLE_NODE_MULTI_WRITER")
	}
	nodeCaps, err := td.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(nodeCaps.GetCapabilities(), func(c *csi.NodeServiceCapability) bool {
		return c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER
	}) {
		t.Error("the node does not claim SINGLE_NODE_MULTI_WRITER")
	}

	modes := []csi.VolumeCapability_AccessMode_Mode{
		csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			c := mountCap(mode)
			other := mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)
			if mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER {
				other = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
			}
			vol, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "am-" + strings.ToLower(mode.String()), VolumeCapabilities: []*csi.VolumeCapability{c},
				CapacityRange: &csi.CapacityRange{RequiredBytes: 8 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			id := vol.GetVolume().GetVolumeId()
			v, err := td.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{c}})
			if err != nil || v.GetConfirmed() == nil {
				t.Fatalf("ValidateVolumeCapabilities(%s): %v %v", mode, v, err)
			}
			dir := t.TempDir()
			staging := filepath.Join(dir, "staging")
			t1, t2, t3 := filepath.Join(dir, "t1"), filepath.Join(dir, "t2"), filepath.Join(dir, "t3")
			if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: c}); err != nil {
				t.Fatal(err)
			}
			publish := func(target string, c *csi.VolumeCapability, readOnly bool) error {
				_, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target,
					VolumeCapability: c, Readonly: readOnly})
				return err
			}
			check := func(what string, err error, want codes.Code) {
				t.Helper()
				if code(err) != want {
					t.Errorf("%s: %v, want %v", what, err, want)
				}
			}
			readOnly := mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
			check("first target", publish(t1, c, readOnly), codes.OK)
			check("first target again", publish(t1, c, readOnly), codes.OK)
			check("first target, another mode", publish(t1, other, readOnly), codes.AlreadyExists)
			check("another target, another mode", publish(t3, other, readOnly), codes.FailedPrecondition)
			if mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER {
				check("second target", publish(t2, c, false), codes.OK)
				check("third target, read-only", publish(t3, c, true), codes.OK)
				// One file system behind every target.
				if err := os.WriteFile(filepath.Join(t1, "SHARED.TXT"), []byte("one volume"), 0o644); err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(filepath.Join(t2, "SHARED.TXT")); err != nil || string(b) != "one volume" {
					t.Errorf("the second target reads %q, %v", b, err)
				}
				if err := os.WriteFile(filepath.Join(t3, "RO.TXT"), nil, 0o644); err == nil {
					t.Error("the read-only target takes writes")
				}
			} else {
				check("second target", publish(t2, c, readOnly), codes.FailedPrecondition)
				check("second target, read-only", publish(t2, c, true), codes.FailedPrecondition)
			}
			for _, target := range []string{t1, t2, t3} {
				if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
					t.Fatal(err)
				}
			}
			// With the first target gone, a new one may take its place.
			check("a target after the first is gone", publish(t2, c, readOnly), codes.OK)
			if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: t2}); err != nil {
				t.Fatal(err)
			}
			if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
				t.Fatal(err)
			}
			if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
