package driver

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// asUser runs a command as uid with only gid as its group, as a pod's process runs.
func asUser(uid, gid string, args ...string) error {
	return exec.Command("setpriv", append([]string{"--reuid=" + uid, "--regid=" + gid, "--clear-groups", "--"}, args...)...).Run()
}

// TestMountGroup: a volume mount group (a pod's fsGroup) owns every file and may write; others
// may read but not write; without a group, a user who is not the owner cannot write.
func TestMountGroup(t *testing.T) {
	requireFUSE(t)
	testenv.RequireTool(t, "setpriv")
	td := startDriver(t, "", nil)
	ctx := context.Background()
	for _, tt := range []struct {
		name, group   string
		groupWrites   bool
		fileGroupWant uint32
	}{
		{"fsGroup 2000", "2000", true, 2000},
		{"no fsGroup", "", false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vol, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "grp-" + map[bool]string{true: "a", false: "b"}[tt.group != ""],
				VolumeCapabilities: []*csi.VolumeCapability{rw}, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			id := vol.GetVolume().GetVolumeId()
			dir := t.TempDir()
			staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
			c := mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
			c.GetMount().VolumeMountGroup = tt.group
			if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: c}); err != nil {
				t.Fatal(err)
			}
			if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: c}); err != nil {
				t.Fatal(err)
			}
			// The parent directories of t.TempDir are private to root; let the test user in.
			for p := target; p != "/"; p = filepath.Dir(p) {
				if p == target {
					continue
				}
				st, err := os.Stat(p)
				if err == nil && st.Mode().Perm()&0o001 == 0 {
					os.Chmod(p, st.Mode().Perm()|0o011)
				}
			}
			err = asUser("1000", tt.group+map[bool]string{true: "", false: "1000"}[tt.group != ""], "touch", filepath.Join(target, "by-pod"))
			if tt.groupWrites && err != nil {
				t.Fatalf("a process in the mount group cannot write: %v", err)
			}
			if !tt.groupWrites && err == nil {
				t.Fatalf("a process outside the owner and group could write")
			}
			if err := os.WriteFile(filepath.Join(target, "by-root"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(target, "by-root"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Gid != tt.fileGroupWant {
				t.Errorf("files belong to group %d, want %d", st.Gid, tt.fileGroupWant)
			}
			if asUser("1001", "1001", "cat", filepath.Join(target, "by-root")) != nil {
				t.Errorf("others cannot read the volume")
			}
			if asUser("1001", "1001", "touch", filepath.Join(target, "by-other")) == nil {
				t.Errorf("a process outside the group could write")
			}
			unpublishAndUnstage(t, td, id, dir)
		})
	}
}

// TestReadOnlyPublish: a read-only publish refuses writes while the staging mount still takes
// them, and a reader-only access mode stages read-only.
func TestReadOnlyPublish(t *testing.T) {
	requireFUSE(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()
	vol, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "ro", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 8 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: rw, Readonly: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "no"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing through a read-only publish: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(staging, "yes"), []byte("x"), 0o644); err != nil {
		t.Fatalf("writing at the read-write staging path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(target, "yes")); err != nil {
		t.Fatalf("the read-only target does not show the file: %v", err)
	}
	unpublishAndUnstage(t, td, id, dir)

	ro := mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)
	if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: ro}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "no"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing to a volume staged reader-only: %v, want EROFS", err)
	}
	if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); code(err) == 0 {
		t.Fatalf("a read-write publish of a read-only staged volume succeeded")
	}
	if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
}
