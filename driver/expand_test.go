package driver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/csi-fat/csi-fat/internal/testenv"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"
)

// TestExpandCapabilities: the node claims EXPAND_VOLUME, the plugin online expansion, and the
// controller not EXPAND_VOLUME: a volume grows on its own node, so csi-resizer takes the node's
// part for the whole resize.
func TestExpandCapabilities(t *testing.T) {
	td := startDriver(t, "", nil)
	ctx := context.Background()
	pc, err := td.id.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	online := false
	for _, c := range pc.GetCapabilities() {
		online = online || c.GetVolumeExpansion().GetType() == csi.PluginCapability_VolumeExpansion_ONLINE
	}
	cc, err := td.ctrl.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl := false
	for _, c := range cc.GetCapabilities() {
		ctrl = ctrl || c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_EXPAND_VOLUME
	}
	nc, err := td.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	nodeExp := false
	for _, c := range nc.GetCapabilities() {
		nodeExp = nodeExp || c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_EXPAND_VOLUME
	}
	if !online || ctrl || !nodeExp {
		t.Fatalf("online expansion %v, controller EXPAND_VOLUME %v, node EXPAND_VOLUME %v: want online and node, not controller", online, ctrl, nodeExp)
	}
}

// TestExpandWhileWriting grows a published 64 MiB volume with maxSize 1Gi to 1 GiB while an
// application writes a file through the FUSE mount, in both mounter modes: ControllerExpandVolume
// grows the image, NodeExpandVolume the file system. The writer sees no error and writes on past
// the old size, statfs on the mount and NodeGetVolumeStats show the new size at once, the node
// state records it, and after unstaging fsck.fat -n finds the volume clean and mtools reads the
// file back with every byte written.
func TestExpandWhileWriting(t *testing.T) {
	requireFUSE(t)
	testenv.RequireTool(t, "fsck.fat", "mdir", "mcopy")
	for _, mode := range []string{mounters.InProcess, mounters.Process} {
		t.Run(mode, func(t *testing.T) {
			td := startDriver(t, "", func(c *Config) { c.Node.Mounter.Mode = mode })
			ctx := context.Background()
			vol, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "growing", VolumeCapabilities: []*csi.VolumeCapability{rw},
				CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20}, Parameters: map[string]string{volume.ParamMaxSize: "1Gi"}})
			if err != nil {
				t.Fatal(err)
			}
			id := vol.GetVolume().GetVolumeId()
			dir := t.TempDir()
			target := stageAndPublish(t, td, id, dir)
			before := statfsBytes(t, target)

			// The writer writes 1 MiB records, fsync'ing every 8, 100 MiB in all: past the old size.
			// At 40 MiB it waits for the growth, so that it cannot run out of the old space first.
			const records = 100
			grown := make(chan struct{})
			done := make(chan error, 1)
			started := make(chan struct{})
			var written []byte
			go func() {
				f, err := os.Create(filepath.Join(target, "STREAM.BIN"))
				if err != nil {
					done <- err
					return
				}
				for i := 0; i < records; i++ {
					if i == 8 {
						close(started)
					}
					if i == 40 {
						<-grown
					}
					rec := bytes.Repeat([]byte(fmt.Sprintf("record %04d ", i)), (1<<20)/12+1)[:1<<20]
					if _, err := f.Write(rec); err != nil {
						f.Close()
						done <- fmt.Errorf("write record %d: %w", i, err)
						return
					}
					written = append(written, rec...)
					if i%8 == 7 {
						if err := f.Sync(); err != nil {
							f.Close()
							done <- fmt.Errorf("fsync after record %d: %w", i, err)
							return
						}
					}
				}
				done <- f.Close()
			}()
			<-started
			cresp, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id,
				CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}, VolumeCapability: rw})
			if err != nil {
				close(grown)
				t.Fatalf("ControllerExpandVolume: %v", err)
			}
			if cresp.GetCapacityBytes() != 1<<30 || !cresp.GetNodeExpansionRequired() {
				t.Errorf("ControllerExpandVolume: %v, want 1 GiB and node expansion", cresp)
			}
			nresp, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target,
				CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}, StagingTargetPath: filepath.Join(dir, "staging"), VolumeCapability: rw})
			close(grown)
			if err != nil {
				t.Fatalf("NodeExpandVolume: %v", err)
			}
			if nresp.GetCapacityBytes() != 1<<30 {
				t.Errorf("NodeExpandVolume answered %d bytes, want 1 GiB", nresp.GetCapacityBytes())
			}
			// statfs on the mount shows the new size at once (the FATs, 8 MiB each, are not data).
			after := statfsBytes(t, target)
			if after <= before || after < 1<<30-20<<20 {
				t.Errorf("statfs on the mount: %d bytes before, %d after; want about 1 GiB", before, after)
			}
			stats, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
			if err != nil {
				t.Fatal(err)
			}
			if total := usage(t, stats, csi.VolumeUsage_BYTES).GetTotal(); total != after {
				t.Errorf("NodeGetVolumeStats: %d bytes in all, statfs %d", total, after)
			}
			// Idempotent: the same calls again change nothing.
			if r, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id,
				CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}}); err != nil || r.GetCapacityBytes() != 1<<30 {
				t.Errorf("ControllerExpandVolume again: %v, %v", r, err)
			}
			if r, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target}); err != nil || r.GetCapacityBytes() != 1<<30 {
				t.Errorf("NodeExpandVolume again: %v, %v", r, err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the writer: %v", err)
			}
			st := readState(t, td)
			if v := st.Volumes["growing"]; v == nil || v.Size != 1<<30 {
				t.Errorf("state: volume %+v, want 1 GiB", v)
			}
			if s := st.Staged["growing"]; s == nil || s.Size != 1<<30 {
				t.Errorf("state: staging %+v, want the file system's 1 GiB", s)
			}
			unpublishAndUnstage(t, td, id, dir)

			img := filepath.Join(td.dir, "pool", "growing.img")
			if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil || strings.Count(strings.TrimSpace(string(out)), "\n") != 1 {
				t.Fatalf("fsck.fat -n: %v\n%s", err, out)
			}
			if out := mtoolsRun(t, "mdir", "-i", img, "::"); !regexp.MustCompile(`STREAM\s+BIN\s+104857600 `).MatchString(out) {
				t.Errorf("mdir does not list STREAM.BIN with 100 MiB:\n%s", out)
			}
			copied := filepath.Join(t.TempDir(), "stream")
			mtoolsRun(t, "mcopy", "-i", img, "::STREAM.BIN", copied)
			if got := sha256Of(t, copied); got != sha256.Sum256(written) {
				t.Error("STREAM.BIN as mcopy reads it differs from what the writer wrote")
			}
		})
	}
}

// TestExpandRefusals: growth that cannot be done is refused with the spec's code and nothing
// written (the image's checksum and size unchanged): past maxSize, past the default room, past
// the FAT type's limit (OutOfRange), beyond the pool's capacity (ResourceExhausted), a USB
// volume (OutOfRange, its own size is fine); IDs of no volume and of another node are NotFound,
// a path the volume is not staged or published at NotFound, a capacity above the volume's
// before ControllerExpandVolume OutOfRange.
func TestExpandRefusals(t *testing.T) {
	requireFUSE(t)
	var st unix.Statfs_t
	dir := t.TempDir()
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	// The pool keeps all but 2 GiB of its file system in reserve: a volume cannot grow by 15 GiB
	// (and what other processes write meanwhile cannot starve the growth that must work).
	if free < 3<<30 {
		testenv.Missing(t, "3 GiB free in %s (it has %d bytes)", dir, free)
	}
	td := startDriver(t, dir, func(c *Config) { c.Node.Reserve = free - 2<<30 })
	ctx := context.Background()
	create := func(name string, size int64, params map[string]string) string {
		t.Helper()
		v, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rw},
			CapacityRange: &csi.CapacityRange{RequiredBytes: size}, Parameters: params})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return v.GetVolume().GetVolumeId()
	}
	refused := func(what, name, id string, to int64, want codes.Code) {
		t.Helper()
		img := filepath.Join(td.dir, "pool", name+".img")
		sum, size := sha256Of(t, img), fileSize(t, img)
		_, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: to}})
		if code(err) != want {
			t.Errorf("%s: %v, want %v", what, err, want)
		} else {
			t.Logf("%s: %v", what, err)
		}
		if sha256Of(t, img) != sum || fileSize(t, img) != size {
			t.Errorf("%s: the image changed", what)
		}
	}
	refused("past maxSize", "capped", create("capped", 64<<20, map[string]string{volume.ParamMaxSize: "128Mi"}), 256<<20, codes.OutOfRange)
	refused("past the default room", "plain", create("plain", 64<<20, nil), 1<<30, codes.OutOfRange)
	refused("past FAT12's limit", "tiny", create("tiny", 4<<20, map[string]string{volume.ParamFATType: "12"}), 16<<20, codes.OutOfRange)
	refused("beyond the pool's capacity", "big", create("big", 1<<30, map[string]string{volume.ParamMaxSize: "16Gi"}), 16<<30, codes.ResourceExhausted)

	// Within the room it grows, and shrinking is not growing: the larger size stays.
	plain := create("plain", 64<<20, nil)
	if r, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: plain, CapacityRange: &csi.CapacityRange{RequiredBytes: 100 << 20}}); err != nil || r.GetCapacityBytes() != 100<<20 {
		t.Errorf("grow within the default room: %v, %v", r, err)
	}
	if r, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: plain, CapacityRange: &csi.CapacityRange{RequiredBytes: 80 << 20}}); err != nil || r.GetCapacityBytes() != 100<<20 {
		t.Errorf("a smaller size: %v, %v, want the 100 MiB it has", r, err)
	}
	if _, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: plain, CapacityRange: &csi.CapacityRange{RequiredBytes: 90 << 20, LimitBytes: 95 << 20}}); code(err) != codes.OutOfRange {
		t.Errorf("a limit below the size it has: %v, want OutOfRange", err)
	}

	for _, c := range []struct {
		what string
		id   string
		want codes.Code
	}{
		{"empty ID", "", codes.InvalidArgument},
		{"no such volume", volume.ID{Pool: volume.PoolImage, Node: testNode, Name: "nothing"}.String(), codes.NotFound},
		{"another node's volume", volume.ID{Pool: volume.PoolImage, Node: "node-b", Name: "plain"}.String(), codes.NotFound},
		{"an ID not of the driver's form", "fake-vol-id-1", codes.NotFound},
	} {
		_, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: c.id, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
		if code(err) != c.want {
			t.Errorf("ControllerExpandVolume, %s: %v, want %v", c.what, err, c.want)
		}
		_, err = td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: c.id, VolumePath: "/some/path"})
		if code(err) != c.want {
			t.Errorf("NodeExpandVolume, %s: %v, want %v", c.what, err, c.want)
		}
	}
	if _, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: plain}); code(err) != codes.InvalidArgument {
		t.Errorf("no capacity range: %v, want InvalidArgument", err)
	}

	vdir := t.TempDir()
	target := stageAndPublish(t, td, plain, vdir)
	if _, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: plain, VolumePath: filepath.Join(vdir, "elsewhere")}); code(err) != codes.NotFound {
		t.Errorf("NodeExpandVolume at a path the volume is not at: %v, want NotFound", err)
	}
	if r, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: plain, VolumePath: target}); err != nil || r.GetCapacityBytes() != 100<<20 {
		t.Errorf("NodeExpandVolume within the image: %v, %v", r, err)
	}
	if got := statfsBytes(t, target); got < 100<<20-2<<20 {
		t.Errorf("statfs after NodeExpandVolume: %d bytes, want about 100 MiB", got)
	}
	// Past the image's size NodeExpandVolume grows the image first (the controller does not claim
	// EXPAND_VOLUME), then the file system; past the volume's room it is OutOfRange, as
	// ControllerExpandVolume refuses it.
	if _, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: plain, VolumePath: target,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}}); code(err) != codes.OutOfRange {
		t.Errorf("NodeExpandVolume past the volume's room: %v, want OutOfRange", err)
	}
	if r, err := td.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: plain, VolumePath: target,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 120 << 20}}); err != nil || r.GetCapacityBytes() != 120<<20 {
		t.Errorf("NodeExpandVolume past the image's size: %v, %v, want the image and its file system grown to 120 MiB", r, err)
	}
	if got := statfsBytes(t, target); got < 120<<20-2<<20 {
		t.Errorf("statfs after NodeExpandVolume past the image: %d bytes, want about 120 MiB", got)
	}
	unpublishAndUnstage(t, td, plain, vdir)
}

// TestExpandUSB: a USB volume cannot grow (OutOfRange, the device untouched); asking for its
// own size or less answers that size with no node expansion needed.
func TestExpandUSB(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	stick := fake.Add(t, 32<<20, "Fake", "Stick", "EXPAND0001")
	td := startDriver(t, "", withUSB(fake))
	ctx := context.Background()
	vol, err := usbVolume(t, td, "stick", 16<<20, map[string]string{volume.ParamPool: volume.PoolUSB})
	if err != nil {
		t.Fatal(err)
	}
	id, size := vol.GetVolumeId(), vol.GetCapacityBytes()
	dev := "/dev/" + stick.Kernel
	sum := sha256Of(t, dev)
	_, err = td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: size + 1<<20}})
	if code(err) != codes.OutOfRange {
		t.Errorf("grow a usb volume: %v, want OutOfRange", err)
	}
	if sha256Of(t, dev) != sum {
		t.Error("the refused growth changed the device")
	}
	r, err := td.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: size}})
	if err != nil || r.GetCapacityBytes() != size || r.GetNodeExpansionRequired() {
		t.Errorf("expand a usb volume to its own size: %v, %v; want %d, no node expansion", r, err, size)
	}
}

func statfsBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * int64(st.Bsize)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// readState reads the driver's node-local state file.
func readState(t *testing.T, td *testDriver) *volume.State {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(td.dir, "state", volume.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st volume.State
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// mtoolsRun runs an mtools command without a configuration and returns its output.
func mtoolsRun(t *testing.T, tool string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool, args...)
	cmd.Env = append(os.Environ(), "MTOOLSRC=/dev/null", "MTOOLS_SKIP_CHECK=1", "LC_ALL=C.UTF-8")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestExpandAcrossRestart: a volume grown while staged keeps its size across a SIGKILL of the
// driver's process, in both mounter modes: the next process (adopting the mounter, or serving
// the volume again) reports the grown size in the volume stats and its node state, a file fills
// space only the grown size has, NodeExpandVolume again changes nothing, and fsck.fat -n finds
// the volume clean after unstaging.
func TestExpandAcrossRestart(t *testing.T) {
	requireFUSE(t)
	testenv.RequireTool(t, "fsck.fat")
	for _, mode := range []string{mounters.InProcess, mounters.Process} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			t.Cleanup(func() { detachUnder(t, dir) })
			withMode := func(c *Config) { c.Node.Mounter.Mode = mode }
			staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
			ctx := context.Background()
			c := startChild(t, dir, withMode)
			vol, err := c.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "kept", VolumeCapabilities: []*csi.VolumeCapability{rw},
				CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20}, Parameters: map[string]string{volume.ParamMaxSize: "256Mi"}})
			if err != nil {
				t.Fatal(err)
			}
			id := vol.GetVolume().GetVolumeId()
			if _, err := c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 200 << 20}}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target}); err != nil {
				t.Fatal(err)
			}
			grown := statfsBytes(t, target)
			c.end(t, syscall.SIGKILL)

			c = startChild(t, dir, withMode)
			stats, err := c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
			if err != nil {
				t.Fatal(err)
			}
			if total := usage(t, stats, csi.VolumeUsage_BYTES).GetTotal(); total != grown || total < 190<<20 {
				t.Errorf("after the restart the volume has %d bytes, %d before it", total, grown)
			}
			if got := statfsBytes(t, staging); got != grown {
				t.Errorf("statfs at the staging path after the restart: %d bytes, want %d", got, grown)
			}
			data, err := os.ReadFile(filepath.Join(dir, "state", volume.StateFile))
			if err != nil {
				t.Fatal(err)
			}
			var st volume.State
			if err := json.Unmarshal(data, &st); err != nil {
				t.Fatal(err)
			}
			if s := st.Staged["kept"]; s == nil || s.Size != 200<<20 {
				t.Errorf("the staging's record after the restart: %+v, want 200 MiB", s)
			}
			// 120 MiB fit only in the grown volume.
			big := bytes.Repeat([]byte("grown space "), 10<<20)
			if err := os.WriteFile(filepath.Join(staging, "BIG.BIN"), big, 0o644); err != nil {
				t.Fatalf("write 120 MiB into the grown volume: %v", err)
			}
			if r, err := c.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: staging}); err != nil || r.GetCapacityBytes() != 200<<20 {
				t.Errorf("NodeExpandVolume after the restart: %v, %v", r, err)
			}
			if _, err := c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
				t.Fatal(err)
			}
			img := filepath.Join(dir, "pool", "kept.img")
			if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil || strings.Count(strings.TrimSpace(string(out)), "\n") != 1 {
				t.Fatalf("fsck.fat -n: %v\n%s", err, out)
			}
			c.end(t, syscall.SIGTERM)
		})
	}
}
