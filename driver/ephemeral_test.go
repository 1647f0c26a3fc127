package driver

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csi-fat/csi-fat/node/volume"
)

// inlineID is a volume ID as kubelet makes it for an inline volume: "csi-" and a hash.
const inlineID = "csi-3f1e0c7d9a2b4c5d6e7f80912a3b4c5d6e7f80912a3b4c5d6e7f80912a3b4c5d"

// inlineContext is what kubelet sends for an inline volume with these volumeAttributes.
func inlineContext(attrs map[string]string) map[string]string {
	ctx := map[string]string{
		volume.EphemeralContextKey:               "true",
		"csi.storage.k8s.io/pod.name":            "scratch-pod",
		"csi.storage.k8s.io/pod.namespace":       "default",
		"csi.storage.k8s.io/pod.uid":             "0f6b7c1e-5a4d-4b8e-9c2f-1d3e5f7a9b0c",
		"csi.storage.k8s.io/serviceAccount.name": "default",
	}
	for k, v := range attrs {
		ctx[k] = v
	}
	return ctx
}

func publishInline(ctx context.Context, nc csi.NodeClient, id, target string, attrs map[string]string) error {
	_, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: target,
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER), VolumeContext: inlineContext(attrs)})
	return err
}

// inlineImage is the one image in the pool, which must be an inline volume's.
func inlineImage(t *testing.T, dir string) string {
	t.Helper()
	imgs, err := filepath.Glob(filepath.Join(dir, "pool", "*.img"))
	if err != nil || len(imgs) != 1 || !strings.HasPrefix(filepath.Base(imgs[0]), "ephemeral-") {
		t.Fatalf("pool holds %v (%v), want one inline volume's image", imgs, err)
	}
	return imgs[0]
}

// TestEphemeral: an inline volume through the real gRPC server and FUSE: NodePublishVolume makes
// a fresh FAT volume from the volume attributes and binds it at the target; it is the node's
// alone (neither listed nor validated nor deleted by the controller); NodeUnpublishVolume takes
// it away with its image. Bad attributes leave nothing behind.
func TestEphemeral(t *testing.T) {
	requireFUSE(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()
	target := filepath.Join(td.dir, "pods", "uid", "volumes", "scratch")
	attrs := map[string]string{"size": "48Mi", "fatType": "16", "label": "scratch", "mode": "flush"}

	bad := map[string]map[string]string{
		"unknown attribute":   {"size": "48Mi", "colour": "blue"},
		"usb pool":            {"pool": "usb"},
		"size in words":       {"size": "lots"},
		"negative size":       {"size": "-1Mi"},
		"size beyond FAT":     {"size": "4Ti"},
		"FAT12 too large":     {"size": "1Gi", "fatType": "12"},
		"label too long":      {"label": "MUCH TOO LONG A LABEL"},
		"adopt on image pool": {"adopt": "true"},
	}
	for what, a := range bad {
		err := publishInline(ctx, td.node, inlineID, target, a)
		if c := code(err); c != codes.InvalidArgument && c != codes.OutOfRange {
			t.Errorf("%s: %v, want InvalidArgument or OutOfRange", what, err)
		}
	}
	if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: inlineID, TargetPath: target, StagingTargetPath: filepath.Join(td.dir, "staging"),
		VolumeCapability: rw, VolumeContext: inlineContext(attrs)}); code(err) != codes.InvalidArgument {
		t.Errorf("an inline volume with a staging path: %v, want InvalidArgument", err)
	}
	if files := poolFiles(t, td); len(files) != 0 {
		t.Fatalf("refused inline volumes left %v in the pool", files)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("refused inline volumes made the target: %v", err)
	}

	if err := publishInline(ctx, td.node, inlineID, target, attrs); err != nil {
		t.Fatal(err)
	}
	img := inlineImage(t, td.dir)
	if st, err := os.Stat(img); err != nil || st.Size() != 48<<20 {
		t.Fatalf("image %s: %v, %v; want 48 MiB", img, st, err)
	}
	writeSynced(t, filepath.Join(target, "HELLO.TXT"), "inline\n")
	if out, err := exec.Command("mtype", "-i", img, "::/HELLO.TXT").Output(); err != nil || string(out) != "inline\n" {
		t.Errorf("mtype HELLO.TXT: %q, %v", out, err)
	}
	if out, err := exec.Command("minfo", "-i", img, "::").Output(); err != nil || !strings.Contains(string(out), `disk type="FAT16   "`) ||
		!strings.Contains(string(out), `label="SCRATCH    "`) {
		t.Errorf("minfo: %v\n%s\nwant FAT16 labelled SCRATCH", err, out)
	}
	stats, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: inlineID, VolumePath: target})
	if err != nil || stats.GetVolumeCondition().GetAbnormal() {
		t.Fatalf("stats: %v, %v", stats, err)
	}
	if total := stats.GetUsage()[0].GetTotal(); total < 40<<20 || total > 48<<20 {
		t.Errorf("stats: %d bytes in all, want most of 48 MiB", total)
	}

	// The same call again is no error; another target, or other attributes, are.
	if err := publishInline(ctx, td.node, inlineID, target, attrs); err != nil {
		t.Errorf("publishing again: %v", err)
	}
	if err := publishInline(ctx, td.node, inlineID, target+"2", attrs); code(err) != codes.FailedPrecondition {
		t.Errorf("a second target: %v, want FailedPrecondition", err)
	}
	if err := publishInline(ctx, td.node, inlineID, target, map[string]string{"size": "64Mi"}); code(err) != codes.AlreadyExists {
		t.Errorf("other attributes: %v, want AlreadyExists", err)
	}

	// The controller does not know it: it is not of its making.
	list, err := td.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil || len(list.GetEntries()) != 0 {
		t.Errorf("ListVolumes: %v, %v; want no entries", list, err)
	}
	if _, err := td.ctrl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: inlineID, VolumeCapabilities: []*csi.VolumeCapability{rw}}); code(err) != codes.NotFound {
		t.Errorf("ValidateVolumeCapabilities: %v, want NotFound", err)
	}
	if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: inlineID}); err != nil {
		t.Errorf("DeleteVolume: %v", err)
	}
	name := strings.TrimSuffix(filepath.Base(img), ".img")
	if _, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rw}}); code(err) != codes.AlreadyExists {
		t.Errorf("CreateVolume with the inline volume's name: %v, want AlreadyExists", err)
	}
	if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "image:node-a:" + name, StagingTargetPath: filepath.Join(td.dir, "staging"), VolumeCapability: rw}); code(err) != codes.NotFound {
		t.Errorf("staging the inline volume by a driver ID: %v, want NotFound", err)
	}
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("the controller's calls took the image: %v", err)
	}

	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: inlineID, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target after unpublish: %v", err)
	}
	if files := poolFiles(t, td); len(files) != 0 {
		t.Errorf("pool after unpublish: %v", files)
	}
	if m := mountsUnder(t, td.dir); len(m) != 0 {
		t.Errorf("mounts after unpublish: %v", m)
	}
	if left, _ := os.ReadDir(filepath.Join(td.dir, "state", "ephemeral")); len(left) != 0 {
		t.Errorf("serving directories after unpublish: %v", left)
	}
	if _, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: inlineID, VolumePath: target}); code(err) != codes.NotFound {
		t.Errorf("stats after unpublish: %v, want NotFound", err)
	}
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: inlineID, TargetPath: target}); code(err) != codes.NotFound {
		t.Errorf("unpublishing again: %v, want NotFound", err)
	}
	// A pod's volume made again is a fresh one.
	if err := publishInline(ctx, td.node, inlineID, target, attrs); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(target, "HELLO.TXT")); !os.IsNotExist(err) {
		t.Errorf("a new inline volume holds the old one's file: %v", err)
	}
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: inlineID, TargetPath: target}); err != nil {
		t.Fatal(err)
	}

	// Read-only access is served read-only, down to the FUSE mount.
	if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: inlineID, TargetPath: target,
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY), VolumeContext: inlineContext(attrs)}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "NO.TXT"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing to a read-only inline volume: %v, want EROFS", err)
	}
	served := mountsUnder(t, filepath.Join(td.dir, "state"))
	if len(served) != 1 {
		t.Errorf("the inline volume is served at %v, want one mount in the state directory", served)
	}
	for _, mp := range served {
		if err := os.WriteFile(filepath.Join(mp, "NO.TXT"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
			t.Errorf("writing where the read-only inline volume is served: %v, want EROFS", err)
		}
	}
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: inlineID, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if files := poolFiles(t, td); len(files) != 0 {
		t.Errorf("pool after the read-only inline volume: %v", files)
	}
}

// TestEphemeralRestart: the plugin's process dies with an inline volume published; the next one
// serves it again at the target with its data, and unpublishing then removes it, clean by
// fsck.fat up to the end. An inline volume no target holds (a crash between making it and binding
// it) is removed at the next start.
func TestEphemeralRestart(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	t.Cleanup(func() { detachUnder(t, dir) })
	target := filepath.Join(dir, "pods", "uid", "volumes", "scratch")
	ctx := context.Background()

	c := startChild(t, dir)
	if err := publishInline(ctx, c.node, inlineID, target, map[string]string{"size": "32Mi"}); err != nil {
		t.Fatal(err)
	}
	writeSynced(t, filepath.Join(target, "kept.txt"), "before the crash\n")
	c.end(t, syscall.SIGKILL)
	if _, err := os.ReadDir(target); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after SIGKILL the target should be a dead mount (ENOTCONN), got %v", err)
	}
	c = startChild(t, dir)
	if got, err := os.ReadFile(filepath.Join(target, "kept.txt")); err != nil || string(got) != "before the crash\n" {
		t.Fatalf("after restart the target reads %q, %v", got, err)
	}
	stats, err := c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: inlineID, VolumePath: target})
	if err != nil || stats.GetVolumeCondition().GetAbnormal() {
		t.Fatalf("stats after restart: %v, %v", stats, err)
	}
	writeSynced(t, filepath.Join(target, "after.txt"), "after the restart\n")
	// SIGTERM writes everything back; with the process gone, the image can be judged.
	c.end(t, syscall.SIGTERM)
	img := inlineImage(t, dir)
	checkLeftMounted(t, img)
	for name, want := range map[string]string{"kept.txt": "before the crash\n", "after.txt": "after the restart\n"} {
		if out, err := exec.Command("mtype", "-i", img, "::/"+name).Output(); err != nil || string(out) != want {
			t.Errorf("mtype %s: %q, %v; want %q", name, out, err, want)
		}
	}
	c = startChild(t, dir)
	if _, err := c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: inlineID, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if imgs, _ := filepath.Glob(filepath.Join(dir, "pool", "*.img")); len(imgs) != 0 {
		t.Errorf("images after unpublish: %v", imgs)
	}
	if m := mountsUnder(t, dir); len(m) != 0 {
		t.Errorf("mounts after unpublish: %v", m)
	}

	// A crash after making an inline volume, before binding it: the state holds it with no
	// target. The next start removes it.
	if err := publishInline(ctx, c.node, inlineID, target, nil); err != nil {
		t.Fatal(err)
	}
	c.end(t, syscall.SIGKILL)
	statePath := filepath.Join(dir, "state", volume.StateFile)
	raw, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]json.RawMessage
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	st["published"] = json.RawMessage("{}")
	if raw, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(statePath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	detachUnder(t, filepath.Join(dir, "pods"))
	c = startChild(t, dir)
	if imgs, _ := filepath.Glob(filepath.Join(dir, "pool", "*.img")); len(imgs) != 0 {
		t.Errorf("an inline volume no target holds survives the restart: %v", imgs)
	}
	if m := mountsUnder(t, filepath.Join(dir, "state")); len(m) != 0 {
		t.Errorf("mounts of the removed inline volume: %v", m)
	}
	if _, err := c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: inlineID, VolumePath: target}); code(err) != codes.NotFound {
		t.Errorf("stats of the removed inline volume: %v, want NotFound", err)
	}
	c.end(t, syscall.SIGTERM)
}

// checkLeftMounted runs fsck.fat -n on the image of a volume left mounted (written back, not
// unmounted): the dirty bit is expected and no damage; any other finding fails the test.
func checkLeftMounted(t *testing.T, img string) {
	t.Helper()
	out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput()
	if err == nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case line == "", strings.HasPrefix(line, "fsck.fat "), strings.HasPrefix(line, "Dirty bit is set."),
			strings.TrimSpace(line) == "Automatically removing dirty bit.", line == "Leaving filesystem unchanged.",
			strings.HasPrefix(line, img+": "):
		default:
			t.Fatalf("fsck.fat -n %s: %v, finding %q\n%s", img, err, line, out)
		}
	}
}
