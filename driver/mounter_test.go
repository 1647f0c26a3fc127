package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/volume"
)

// withMounters serves volumes in mounter processes (the test binary stands in for csi-fat).
func withMounters(c *Config) { c.Node.Mounter.Mode = mounters.Process }

// stagedMounter reads the mounter record of a staged volume from the node state in dir.
func stagedMounter(t *testing.T, dir, name string) *volume.MounterRecord {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "state", volume.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st volume.State
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	s := st.Staged[name]
	if s == nil || s.Mounter == nil {
		t.Fatalf("volume %s is not staged with a mounter: %+v", name, s)
	}
	return s.Mounter
}

// alive tells whether pid runs and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("mounter pid %d still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procStatus reads fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// stagePublish makes a volume and stages and publishes it.
func stagePublish(t *testing.T, ctrl csi.ControllerClient, nc csi.NodeClient, name, staging, target string) string {
	t.Helper()
	ctx := context.Background()
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwCap()},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	if _, err := nc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rwCap()}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rwCap()}); err != nil {
		t.Fatal(err)
	}
	return id
}

func rwCap() *csi.VolumeCapability {
	return mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)
}

// writer keeps appending fsync'ed records to a file it holds open on the mount (so the mount
// is busy) until stopped; it fails on the first error.
type writer struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	n    int
	err  error
}

func startWriter(t *testing.T, path string) *writer {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer f.Close()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			_, err := fmt.Fprintf(f, "record %06d\n", i)
			if err == nil {
				err = f.Sync()
			}
			w.mu.Lock()
			if err != nil {
				w.err = err
				w.mu.Unlock()
				return
			}
			w.n = i + 1
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) records() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.err
}

func (w *writer) end(t *testing.T) int {
	t.Helper()
	close(w.stop)
	<-w.done
	n, err := w.records()
	if err != nil {
		t.Fatalf("writing on the mount failed after %d records: %v", n, err)
	}
	return n
}

func checkRecords(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) < n {
		t.Fatalf("%s holds %d records, %d were fsync'ed", path, len(lines), n)
	}
	for i := 0; i < n; i++ {
		if lines[i] != fmt.Sprintf("record %06d", i) {
			t.Fatalf("%s: record %d reads %q", path, i, lines[i])
		}
	}
}

// TestPlainHostMounterOutlivesDriver: with mounter processes, a SIGKILL of the driver leaves the
// mount working while an application writes to it; the next driver adopts the mounter (stats,
// condition, a second publish, unpublish and unstage work), and unstaging makes the mounter
// write back and exit, leaving a clean file system with every record.
func TestPlainHostMounterOutlivesDriver(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	ctx := context.Background()

	c := startChild(t, dir, withMounters)
	id := stagePublish(t, c.ctrl, c.node, "lasting", staging, target)
	mr := stagedMounter(t, dir, "lasting")
	t.Cleanup(func() { syscall.Kill(mr.PID, syscall.SIGKILL) })
	ps := procStatus(t, mr.PID)
	if uid := strings.Fields(ps["Uid"]); uid[0] != "65534" || uid[1] != "65534" {
		t.Fatalf("mounter runs as uid %v", ps["Uid"])
	}
	if gid := strings.Fields(ps["Gid"]); gid[0] != "65534" {
		t.Fatalf("mounter runs as gid %v", ps["Gid"])
	}
	for _, k := range []string{"CapEff", "CapPrm", "CapAmb", "CapInh"} {
		if ps[k] != "0000000000000000" {
			t.Fatalf("mounter has %s %s", k, ps[k])
		}
	}
	if sid, err := unix.Getsid(mr.PID); err != nil || sid != mr.PID {
		t.Fatalf("mounter's session %d, %v: want a session of its own", sid, err)
	}
	// It could not open the image itself: the driver handed it an O_DIRECT twin for large
	// writes and reads, so open for both.
	if img := directDescriptor(t, mr.PID, unix.O_RDWR); img == "" {
		t.Fatal("the mounter holds no O_DIRECT descriptor of its image open for reading and writing")
	}
	// Nor raise the mount's read-ahead: the driver did, without asking the mount.
	var mst syscall.Stat_t
	if err := syscall.Stat(target, &mst); err != nil {
		t.Fatal(err)
	}
	if ra, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(mst.Dev), unix.Minor(mst.Dev))); err != nil || strings.TrimSpace(string(ra)) != strconv.Itoa(mountopt.ReadaheadKB) {
		t.Fatalf("the mount's read-ahead is %q KiB, %v; want %d", ra, err, mountopt.ReadaheadKB)
	}
	// Files are owned as the driver would own them, not by the mounter's user.
	writeSynced(t, filepath.Join(target, "before.txt"), "before the crash\n")
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(target, "before.txt"), &st); err != nil || st.Uid != 0 {
		t.Fatalf("owner %d, %v", st.Uid, err)
	}

	log := filepath.Join(target, "log.txt")
	w := startWriter(t, log)
	time.Sleep(200 * time.Millisecond)
	c.end(t, syscall.SIGKILL)
	n0, _ := w.records()
	time.Sleep(500 * time.Millisecond)
	if n, err := w.records(); err != nil || n <= n0 {
		t.Fatalf("after the driver's SIGKILL the writer did %d→%d records, %v", n0, n, err)
	}
	if got, err := os.ReadFile(filepath.Join(target, "before.txt")); err != nil || string(got) != "before the crash\n" {
		t.Fatalf("reading after the SIGKILL: %q, %v", got, err)
	}

	c = startChild(t, dir, withMounters)
	if !alive(mr.PID) {
		t.Fatal("the mounter is gone after the driver restarted")
	}
	if again := stagedMounter(t, dir, "lasting"); again.PID != mr.PID {
		t.Fatalf("restart replaced mounter %d by %d", mr.PID, again.PID)
	}
	for _, p := range []string{staging, target} {
		stats, err := c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: p})
		if err != nil || stats.GetVolumeCondition().GetAbnormal() || len(stats.GetUsage()) != 2 || stats.GetUsage()[0].GetUsed() <= 0 {
			t.Fatalf("stats at %s after adoption: %v, %v", p, stats, err)
		}
	}
	// Staging again is a no-op; a second target works.
	if _, err := c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rwCap()}); err != nil {
		t.Fatal(err)
	}
	target2 := filepath.Join(dir, "target2")
	if _, err := c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target2, VolumeCapability: rwCap()}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(target2, "before.txt")); err != nil || string(got) != "before the crash\n" {
		t.Fatalf("second target: %q, %v", got, err)
	}
	n := w.end(t)
	if n < 50 {
		t.Fatalf("only %d records written", n)
	}
	checkRecords(t, log, n)
	// Unstage is refused while published, then works: the mounter writes back and exits.
	if _, err := c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("unstage while published: %v", err)
	}
	for _, p := range []string{target, target2} {
		if _, err := c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, mr.PID)
	if m := mountsUnder(t, dir); len(m) != 0 {
		t.Fatalf("mounts left after unstage: %v", m)
	}
	if _, err := os.Stat(mr.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("mounter socket left: %v", err)
	}
	img := filepath.Join(dir, "pool", "lasting.img")
	if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil {
		t.Fatalf("fsck.fat -n after unstage: %v\n%s", err, out)
	}
	out, err := exec.Command("mtype", "-i", img, "::/log.txt").Output()
	if err != nil || !strings.HasPrefix(string(out), "record 000000\n") || strings.Count(string(out), "\n") < n {
		t.Fatalf("mtype log.txt: %d lines, %v; want %d", strings.Count(string(out), "\n"), err, n)
	}
	c.end(t, syscall.SIGTERM)
}

// TestHostileImageLeavesPluginServing: a medium whose parsing crashes or hangs the checker (the
// mounter's test fault stands in for such an image) fails its own staging, within the check's
// time limit; the plugin, which never parses it, goes on serving the node's other volumes.
func TestHostileImageLeavesPluginServing(t *testing.T) {
	requireFUSE(t)
	for _, fault := range []string{"check-panic", "check-hang", "serve-panic"} {
		t.Run(fault, func(t *testing.T) {
			t.Setenv(protocol.FaultEnv, fault+":hostile")
			td := startDriver(t, "", func(c *Config) {
				withMounters(c)
				c.Node.Mounter.CheckTimeout = 2 * time.Second
			})
			dir := td.dir
			ctx := context.Background()
			stagePublish(t, td.ctrl, td.node, "good", filepath.Join(dir, "sg"), filepath.Join(dir, "tg"))
			vol, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "hostile", VolumeCapabilities: []*csi.VolumeCapability{rwCap()},
				CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId(),
				StagingTargetPath: filepath.Join(dir, "sh"), VolumeCapability: rwCap()})
			if status.Code(err) != codes.FailedPrecondition || time.Since(start) > 20*time.Second {
				t.Fatalf("staging the hostile volume: %v after %v", err, time.Since(start))
			}
			t.Logf("staging the hostile volume: %v", err)
			writeSynced(t, filepath.Join(dir, "tg", "still.txt"), "served\n")
			if _, err := td.id.Probe(ctx, &csi.ProbeRequest{}); err != nil {
				t.Fatal(err)
			}
			if m := mountsUnder(t, dir); len(m) != 2 {
				t.Fatalf("mounts after the hostile staging: %v", m)
			}
			socks, _ := filepath.Glob(filepath.Join(dir, "state", "mounters", "*.sock"))
			if len(socks) != 1 {
				t.Fatalf("mounter sockets: %v", socks)
			}
		})
	}
}

// TestOrphanMounterRemoved: a mounter whose volume is no longer staged (its record lost in a
// crash) is found at start, its mount removed and the mounter stopped.
func TestOrphanMounterRemoved(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	c := startChild(t, dir, withMounters)
	stagePublish(t, c.ctrl, c.node, "orphan", staging, target)
	mr := stagedMounter(t, dir, "orphan")
	t.Cleanup(func() { syscall.Kill(mr.PID, syscall.SIGKILL) })
	c.end(t, syscall.SIGKILL)
	// Forget the staging, as a crash before the record was written would have.
	path := filepath.Join(dir, "state", volume.StateFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st volume.State
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	delete(st.Staged, "orphan")
	st.Published = map[string]*volume.PublishRecord{}
	data, _ = json.Marshal(&st)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	syscall.Unmount(target, syscall.MNT_DETACH) // the bind mount's record is gone too
	c = startChild(t, dir, withMounters)
	waitGone(t, mr.PID)
	if m := mountsUnder(t, dir); len(m) != 0 {
		t.Fatalf("mounts left: %v", m)
	}
	if _, err := os.Stat(mr.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left: %v", err)
	}
	img := filepath.Join(dir, "pool", "orphan.img")
	if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil {
		t.Fatalf("fsck.fat -n: %v\n%s", err, out)
	}
	c.end(t, syscall.SIGTERM)
}

// all applies each configuration that is not nil.
func all(cs ...func(*Config)) func(*Config) {
	return func(c *Config) {
		for _, f := range cs {
			if f != nil {
				f(c)
			}
		}
	}
}

// TestUSBAdoptInMounters: the check before adopting a stick, and staging it, run in mounter
// processes, with the results of the in-process driver.
func TestUSBAdoptInMounters(t *testing.T) {
	t.Run("AdoptAndReclaim", func(t *testing.T) { testUSBAdoptAndReclaim(t, withMounters) })
	t.Run("RefusesDamaged", func(t *testing.T) { testUSBAdoptRefusesDamaged(t, withMounters) })
}

// TestRestartWithDeadMounter: a restarted driver finds a staged volume's mounter dead (it died
// with no driver running) and serves the volume again, after the check, at its staging path
// and target.
func TestRestartWithDeadMounter(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	c := startChild(t, dir, withMounters)
	id := stagePublish(t, c.ctrl, c.node, "phoenix", staging, target)
	writeSynced(t, filepath.Join(target, "kept.txt"), "fsync'ed\n")
	mr := stagedMounter(t, dir, "phoenix")
	c.end(t, syscall.SIGKILL)
	if err := syscall.Kill(mr.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, mr.PID)
	c = startChild(t, dir, withMounters)
	again := stagedMounter(t, dir, "phoenix")
	t.Cleanup(func() { syscall.Kill(again.PID, syscall.SIGKILL) })
	if again.PID == mr.PID || !alive(again.PID) {
		t.Fatalf("mounter after restart: %+v (the dead one was %d)", again, mr.PID)
	}
	if got, err := os.ReadFile(filepath.Join(target, "kept.txt")); err != nil || string(got) != "fsync'ed\n" {
		t.Fatalf("target after restart: %q, %v", got, err)
	}
	ctx := context.Background()
	stats, err := c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || stats.GetVolumeCondition().GetAbnormal() {
		t.Fatalf("stats: %v, %v", stats, err)
	}
	if _, err := c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, again.PID)
	c.end(t, syscall.SIGTERM)
}

// directDescriptor returns the file that one of the process's descriptors has open with
// O_DIRECT and the access mode accmode (fdinfo's flags), or "".
func directDescriptor(t *testing.T, pid int, accmode uint64) string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			v, ok := strings.CutPrefix(line, "flags:")
			if !ok {
				continue
			}
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err == nil && flags&unix.O_DIRECT != 0 && flags&unix.O_ACCMODE == accmode {
				target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
				return target
			}
		}
	}
	return ""
}

// TestReadOnlyMounterReadsDirect: a volume staged read-only is served by a mounter that holds the
// image open for reading alone, its O_DIRECT twin too (what serves a read-only volume has no way
// to write the medium), and large reads through the mount come back as written.
func TestReadOnlyMounterReadsDirect(t *testing.T) {
	requireFUSE(t)
	td := startDriver(t, "", withMounters)
	dir := td.dir
	ctx := context.Background()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	id := stagePublish(t, td.ctrl, td.node, "firmware", staging, target)
	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(filepath.Join(target, "image.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}

	ro := mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)
	if _, err := td.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: ro}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: ro, Readonly: true}); err != nil {
		t.Fatal(err)
	}
	mr := stagedMounter(t, dir, "firmware")
	if img := directDescriptor(t, mr.PID, unix.O_RDONLY); img == "" {
		t.Fatal("the read-only mounter holds no O_DIRECT descriptor of its image open for reading")
	}
	if img := directDescriptor(t, mr.PID, unix.O_RDWR); img != "" {
		t.Fatalf("the read-only mounter holds %s open for writing with O_DIRECT", img)
	}
	got, err := os.ReadFile(filepath.Join(target, "image.bin"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("reading the file back through the read-only mount: %v, or the bytes differ", err)
	}
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := td.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
}
