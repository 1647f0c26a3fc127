package driver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/csi-fat/csi-fat/internal/testenv"
	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"
)

func requireSnapshotTools(t *testing.T) {
	t.Helper()
	requireFUSE(t)
	testenv.RequireTool(t, "fsck.fat", "mtype", "mdir")
}

func fromSnapshot(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func fromVolume(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

// createFrom makes a volume from a content source, required bytes and parameters as given.
func createFrom(td *testDriver, name string, src *csi.VolumeContentSource, required int64, params map[string]string) (*csi.Volume, error) {
	resp, err := td.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: required}, Parameters: params, VolumeContentSource: src})
	return resp.GetVolume(), err
}

func snapshotPath(td *testDriver, name string) string {
	return filepath.Join(td.dir, "pool", "snapshots", name+".img")
}

// mtype reads a file of an image with mtools.
func mtype(t *testing.T, img, name string) []byte {
	t.Helper()
	cmd := exec.Command("mtype", "-i", img, "::/"+name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mtype %s %s: %v\n%s", img, name, err, stderr.String())
	}
	return out
}

// checkRecordPrefix requires log to hold records 0..k-1 whole and in order, least <= k <= most.
func checkRecordPrefix(t *testing.T, what string, log []byte, least, most int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(log), "\n"), "\n")
	if len(log) == 0 {
		lines = nil
	}
	if len(lines) < least || len(lines) > most {
		t.Errorf("%s holds %d records; %d were fsync'ed before it was taken and at most %d written by its end", what, len(lines), least, most)
	}
	for i, l := range lines {
		if l != fmt.Sprintf("record %06d", i) {
			t.Fatalf("%s: record %d reads %q", what, i, l)
		}
	}
}

// checkCopyImage judges a copy with fsck.fat and mtools: clean, DATA.BIN as written, log.txt a
// whole prefix of the records; it returns log.txt.
func checkCopyImage(t *testing.T, img string, data []byte, least, most int) []byte {
	t.Helper()
	if ok, out := fsckClean(t, img); !ok {
		t.Errorf("fsck.fat -n %s:\n%s", img, out)
	}
	if got := mtype(t, img, "DATA.BIN"); !bytes.Equal(got, data) {
		t.Errorf("%s: DATA.BIN has %d bytes (sha256 %x), want the %d written (%x)", img, len(got), sha256.Sum256(got), len(data), sha256.Sum256(data))
	}
	log := mtype(t, img, "log.txt")
	checkRecordPrefix(t, img, log, least, most)
	return log
}

func randomData(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// waitRecords waits for the writer to have fsync'ed n records.
func waitRecords(t *testing.T, w *writer, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got, err := w.records()
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
	}
	t.Fatalf("the writer did not get to %d records", n)
}

func statfsTotal(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * uint64(st.Bsize)
}

// TestSnapshotInUse: a snapshot and a clone of a volume that an application writes to: the
// writer sees no error; each copy passes fsck.fat -n, holds the file fsync'ed before byte for
// byte and a whole prefix of the records, every one fsync'ed before the request among them. The
// snapshot is ready, its size the volume's; a larger volume restored from it (on the source's
// node) holds what the snapshot holds, by mtools and through a FUSE publish, in the snapshot's
// file system, grown into the larger image when it is staged.
func TestSnapshotInUse(t *testing.T) {
	requireSnapshotTools(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()
	dir := t.TempDir()
	src := createVolume(t, td, "source", nil)
	target := stageAndPublish(t, td, src, filepath.Join(dir, "source"))
	data := randomData(3<<20+123, 1)
	writeSynced(t, filepath.Join(target, "DATA.BIN"), string(data))
	w := startWriter(t, filepath.Join(target, "log.txt"))
	waitRecords(t, w, 20)

	began := time.Now()
	beforeSnap, _ := w.records()
	snap, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: src})
	if err != nil {
		t.Fatal(err)
	}
	afterSnap, _ := w.records()
	clone, err := createFrom(td, "clone-1", fromVolume(src), 0, map[string]string{volume.ParamFATType: "16"})
	if err != nil {
		t.Fatal(err)
	}
	afterClone, _ := w.records()
	waitRecords(t, w, afterClone+10)
	n := w.end(t)
	checkRecords(t, filepath.Join(target, "log.txt"), n)

	s := snap.GetSnapshot()
	if !s.GetReadyToUse() || s.GetSizeBytes() != 32<<20 || s.GetSourceVolumeId() != src || s.GetSnapshotId() != "snapshot:"+testNode+":snap-1" {
		t.Errorf("snapshot %v: want ready, 32 MiB, of %s, ID snapshot:%s:snap-1", s, src, testNode)
	}
	if at := s.GetCreationTime().AsTime(); at.Before(began.Add(-time.Second)) || at.After(time.Now()) {
		t.Errorf("snapshot creation time %v, not during the request", at)
	}
	snapLog := checkCopyImage(t, snapshotPath(td, "snap-1"), data, beforeSnap, afterSnap+1)
	checkCopyImage(t, filepath.Join(td.dir, "pool", "clone-1.img"), data, afterSnap, afterClone+1)
	if clone.GetCapacityBytes() != 32<<20 || !proto.Equal(clone.GetContentSource(), fromVolume(src)) ||
		!proto.Equal(clone.GetAccessibleTopology()[0], &csi.Topology{Segments: map[string]string{"fat.csi-fat.io/node": testNode}}) {
		t.Errorf("clone %v: want 32 MiB from %s on node %s", clone, src, testNode)
	}

	restored, err := createFrom(td, "restored", fromSnapshot(s.GetSnapshotId()), 48<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if restored.GetCapacityBytes() != 48<<20 || !proto.Equal(restored.GetContentSource(), fromSnapshot(s.GetSnapshotId())) ||
		!proto.Equal(restored.GetAccessibleTopology()[0], &csi.Topology{Segments: map[string]string{"fat.csi-fat.io/node": testNode}}) {
		t.Errorf("restored volume %v: want 48 MiB from the snapshot on node %s", restored, testNode)
	}
	img := filepath.Join(td.dir, "pool", "restored.img")
	if st, err := os.Stat(img); err != nil || st.Size() != 48<<20 {
		t.Fatalf("restored image: %v, %v; want 48 MiB", st, err)
	}
	if log := checkCopyImage(t, img, data, beforeSnap, afterSnap+1); !bytes.Equal(log, snapLog) {
		t.Errorf("the restored volume's log.txt differs from the snapshot's")
	}
	rt := stageAndPublish(t, td, restored.GetVolumeId(), filepath.Join(dir, "restored"))
	for name, want := range map[string][]byte{"DATA.BIN": data, "log.txt": snapLog} {
		if got, err := os.ReadFile(filepath.Join(rt, name)); err != nil || sha256.Sum256(got) != sha256.Sum256(want) {
			t.Errorf("%s through the restored volume's mount: %d bytes, %v; want the snapshot's %d", name, len(got), err, len(want))
		}
	}
	// The snapshot's file system grew into the larger image at staging, as far as its FATs'
	// room allows (eight times the source's by default): 16 MiB more data clusters.
	if got, src := statfsTotal(t, rt), statfsTotal(t, target); got != src+16<<20 {
		t.Errorf("the restored file system has %d bytes, the source's %d: want 16 MiB more, grown into its 48 MiB image", got, src)
	}
	unpublishAndUnstage(t, td, restored.GetVolumeId(), filepath.Join(dir, "restored"))
	if ok, out := fsckClean(t, img); !ok {
		t.Errorf("fsck.fat -n of the restored volume after use:\n%s", out)
	}
	unpublishAndUnstage(t, td, src, filepath.Join(dir, "source"))
}

// listSnapshotsAll pages through ListSnapshots and returns the entries and the pages' sizes.
func listSnapshotsAll(t *testing.T, td *testDriver, req *csi.ListSnapshotsRequest) (snaps []*csi.Snapshot, pages []int) {
	t.Helper()
	for {
		resp, err := td.ctrl.ListSnapshots(context.Background(), req)
		if err != nil {
			t.Fatalf("ListSnapshots(%v): %v", req, err)
		}
		for _, e := range resp.GetEntries() {
			snaps = append(snaps, e.GetSnapshot())
		}
		pages = append(pages, len(resp.GetEntries()))
		if resp.GetNextToken() == "" {
			return snaps, pages
		}
		req = proto.Clone(req).(*csi.ListSnapshotsRequest)
		req.StartingToken = resp.GetNextToken()
		if len(pages) > 100 {
			t.Fatal("ListSnapshots does not end")
		}
	}
}

func snapshotIDs(snaps []*csi.Snapshot) []string {
	var ids []string
	for _, s := range snaps {
		ids = append(ids, s.GetSnapshotId())
	}
	return ids
}

// TestListAndDeleteSnapshots: snapshots are listed in pages with what CreateSnapshot answered,
// filtered by snapshot ID and by source volume (an ID that names nothing here lists nothing); a
// page token stays good when a snapshot goes between pages; deletes remove the file and the
// entry, and deleting again or an ID the driver never issues is OK; a source volume and its
// snapshots are independent: either may be deleted, and a restore still works.
func TestListAndDeleteSnapshots(t *testing.T) {
	requireSnapshotTools(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()
	a, b := createVolume(t, td, "vol-a", nil), createVolume(t, td, "vol-b", nil)
	made := map[string]*csi.Snapshot{}
	var all []string
	for i, src := range []string{a, b, a, b, a} {
		resp, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("snap-%d", i), SourceVolumeId: src})
		if err != nil {
			t.Fatal(err)
		}
		made[resp.GetSnapshot().GetSnapshotId()] = resp.GetSnapshot()
		all = append(all, resp.GetSnapshot().GetSnapshotId())
	}
	snaps, _ := listSnapshotsAll(t, td, &csi.ListSnapshotsRequest{})
	if !slices.Equal(snapshotIDs(snaps), all) {
		t.Fatalf("listed %v, want %v", snapshotIDs(snaps), all)
	}
	for _, s := range snaps {
		if !proto.Equal(s, made[s.GetSnapshotId()]) {
			t.Errorf("listed %v, CreateSnapshot answered %v", s, made[s.GetSnapshotId()])
		}
	}
	for _, max := range []int32{1, 2, 4, 5, 6} {
		snaps, pages := listSnapshotsAll(t, td, &csi.ListSnapshotsRequest{MaxEntries: max})
		if !slices.Equal(snapshotIDs(snaps), all) {
			t.Errorf("max_entries %d: listed %v", max, snapshotIDs(snaps))
		}
		for _, n := range pages {
			if n > int(max) {
				t.Errorf("max_entries %d: a page of %d", max, n)
			}
		}
	}
	for _, tt := range []struct {
		req  *csi.ListSnapshotsRequest
		want []string
	}{
		{&csi.ListSnapshotsRequest{SnapshotId: all[3]}, all[3:4]},
		{&csi.ListSnapshotsRequest{SourceVolumeId: a}, []string{all[0], all[2], all[4]}},
		{&csi.ListSnapshotsRequest{SourceVolumeId: b, MaxEntries: 1}, []string{all[1], all[3]}},
		{&csi.ListSnapshotsRequest{SnapshotId: all[1], SourceVolumeId: b}, all[1:2]},
		{&csi.ListSnapshotsRequest{SnapshotId: all[1], SourceVolumeId: a}, nil},
		{&csi.ListSnapshotsRequest{SnapshotId: "snapshot:" + testNode + ":no-such-snapshot"}, nil},
		{&csi.ListSnapshotsRequest{SnapshotId: "snapshot:node-b:snap-1"}, nil},
		{&csi.ListSnapshotsRequest{SnapshotId: "fake-snapshot-id"}, nil},
		{&csi.ListSnapshotsRequest{SourceVolumeId: "image:" + testNode + ":no-such-volume"}, nil},
		{&csi.ListSnapshotsRequest{SourceVolumeId: "fake-vol-id"}, nil},
	} {
		snaps, _ := listSnapshotsAll(t, td, tt.req)
		if !slices.Equal(snapshotIDs(snaps), tt.want) {
			t.Errorf("ListSnapshots(%v) = %v, want %v", tt.req, snapshotIDs(snaps), tt.want)
		}
	}
	for _, tt := range []struct {
		req  *csi.ListSnapshotsRequest
		want codes.Code
	}{
		{&csi.ListSnapshotsRequest{MaxEntries: -1}, codes.InvalidArgument},
		{&csi.ListSnapshotsRequest{StartingToken: "page-2"}, codes.Aborted},
		{&csi.ListSnapshotsRequest{StartingToken: "after:../x"}, codes.Aborted},
	} {
		if _, err := td.ctrl.ListSnapshots(ctx, tt.req); code(err) != tt.want {
			t.Errorf("ListSnapshots(%v) = %v, want %v", tt.req, err, tt.want)
		}
	}

	// A page token outlives the snapshot it names.
	first, err := td.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := td.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: all[1]}); err != nil {
		t.Fatal(err)
	}
	rest, _ := listSnapshotsAll(t, td, &csi.ListSnapshotsRequest{StartingToken: first.GetNextToken()})
	if !slices.Equal(snapshotIDs(rest), all[2:]) {
		t.Errorf("after deleting the last of the first page: %v, want %v", snapshotIDs(rest), all[2:])
	}
	if _, err := os.Stat(snapshotPath(td, "snap-1")); !os.IsNotExist(err) {
		t.Errorf("the deleted snapshot's file: %v", err)
	}
	for _, tt := range []struct {
		id   string
		want codes.Code
	}{
		{all[1], codes.OK},
		{"snapshot:" + testNode + ":never-made", codes.OK},
		{"fake-snapshot-id", codes.OK},
		{"snapshot:" + testNode + ":../x", codes.OK},
		{"", codes.InvalidArgument},
		{"snapshot:node-b:snap-0", codes.InvalidArgument},
	} {
		if _, err := td.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: tt.id}); code(err) != tt.want {
			t.Errorf("DeleteSnapshot(%q) = %v, want %v", tt.id, err, tt.want)
		}
	}
	snaps, _ = listSnapshotsAll(t, td, &csi.ListSnapshotsRequest{})
	if want := slices.Delete(slices.Clone(all), 1, 2); !slices.Equal(snapshotIDs(snaps), want) {
		t.Errorf("after deletes: %v, want %v", snapshotIDs(snaps), want)
	}

	// The source goes; its snapshots stay and restore.
	if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a}); err != nil {
		t.Fatal(err)
	}
	v, err := createFrom(td, "from-gone", fromSnapshot(all[0]), 0, nil)
	if err != nil {
		t.Fatalf("restoring a snapshot of a deleted volume: %v", err)
	}
	if ok, out := fsckClean(t, filepath.Join(td.dir, "pool", "from-gone.img")); !ok || v.GetCapacityBytes() != 32<<20 {
		t.Errorf("restored %v:\n%s", v, out)
	}
	lv, err := td.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, e := range lv.GetEntries() {
		if e.GetVolume().GetVolumeId() == v.GetVolumeId() {
			listed = proto.Equal(e.GetVolume(), v)
		}
	}
	if !listed {
		t.Errorf("ListVolumes does not list the restored volume as CreateVolume answered it (%v)", v)
	}
	// The snapshot goes; the restored volume stays.
	if _, err := td.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: all[0]}); err != nil {
		t.Fatal(err)
	}
	if ok, out := fsckClean(t, filepath.Join(td.dir, "pool", "from-gone.img")); !ok {
		t.Errorf("the restored volume after its snapshot was deleted:\n%s", out)
	}
}

// poolState is what a refused request must leave as it was: the image pool's files and the
// node-local state.
func poolState(t *testing.T, td *testDriver) string {
	t.Helper()
	state, err := os.ReadFile(filepath.Join(td.dir, "state", volume.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	return treeDigest(t, filepath.Join(td.dir, "pool")) + string(state)
}

// TestBadSnapshotRequests: every malformed or unsatisfiable snapshot, restore or clone request
// gets the code the CSI spec names and changes nothing in the pool or the state; repeating a
// request that succeeded answers the same.
func TestBadSnapshotRequests(t *testing.T) {
	requireSnapshotTools(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()
	a, b := createVolume(t, td, "vol-a", nil), createVolume(t, td, "vol-b", nil)
	snap, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-a", SourceVolumeId: a})
	if err != nil {
		t.Fatal(err)
	}
	snapID := snap.GetSnapshot().GetSnapshotId()
	if _, err := createFrom(td, "restored", fromSnapshot(snapID), 0, nil); err != nil {
		t.Fatal(err)
	}
	before := poolState(t, td)

	for _, tt := range []struct {
		req  *csi.CreateSnapshotRequest
		want codes.Code
	}{
		{&csi.CreateSnapshotRequest{SourceVolumeId: a}, codes.InvalidArgument},
		{&csi.CreateSnapshotRequest{Name: "s"}, codes.InvalidArgument},
		{&csi.CreateSnapshotRequest{Name: "../s", SourceVolumeId: a}, codes.InvalidArgument},
		{&csi.CreateSnapshotRequest{Name: strings.Repeat("s", 129), SourceVolumeId: a}, codes.InvalidArgument},
		{&csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: a, Parameters: map[string]string{"fatType": "32"}}, codes.InvalidArgument},
		{&csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "image:" + testNode + ":no-such-volume"}, codes.NotFound},
		{&csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "image:node-b:vol-a"}, codes.NotFound},
		{&csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "fake-vol-id"}, codes.NotFound},
		{&csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: snapID}, codes.NotFound},
		{&csi.CreateSnapshotRequest{Name: "snap-a", SourceVolumeId: b}, codes.AlreadyExists},
	} {
		if _, err := td.ctrl.CreateSnapshot(ctx, tt.req); code(err) != tt.want {
			t.Errorf("CreateSnapshot(%v) = %v, want %v", tt.req, err, tt.want)
		}
	}
	for _, tt := range []struct {
		name     string
		src      *csi.VolumeContentSource
		required int64
		limit    int64
		params   map[string]string
		want     codes.Code
	}{
		{"new", fromSnapshot("snapshot:" + testNode + ":no-such-snapshot"), 0, 0, nil, codes.NotFound},
		// Another node's source: that node can make the volume, so the claim goes back to the
		// scheduler (ResourceExhausted), not NotFound, which the provisioner takes as final.
		{"new", fromSnapshot("snapshot:node-b:snap-a"), 0, 0, nil, codes.ResourceExhausted},
		{"new", fromVolume("image:node-b:vol-a"), 0, 0, nil, codes.ResourceExhausted},
		{"new", fromSnapshot("fake-snapshot-id"), 0, 0, nil, codes.NotFound},
		{"new", fromSnapshot(a), 0, 0, nil, codes.NotFound},
		{"new", fromVolume("image:" + testNode + ":no-such-volume"), 0, 0, nil, codes.NotFound},
		{"new", fromVolume("fake-vol-id"), 0, 0, nil, codes.NotFound},
		{"new", fromVolume(snapID), 0, 0, nil, codes.NotFound},
		{"new", fromSnapshot(""), 0, 0, nil, codes.InvalidArgument},
		{"new", fromVolume(""), 0, 0, nil, codes.InvalidArgument},
		{"new", &csi.VolumeContentSource{}, 0, 0, nil, codes.InvalidArgument},
		{"new", fromSnapshot(snapID), 0, 16 << 20, nil, codes.OutOfRange},
		{"new", fromVolume(b), 0, 16 << 20, nil, codes.OutOfRange},
		{"new", fromSnapshot(snapID), 0, 0, map[string]string{volume.ParamPool: volume.PoolUSB}, codes.InvalidArgument},
		{"new", fromVolume(b), 0, 0, map[string]string{"no-such-param": "1"}, codes.InvalidArgument},
		{"restored", fromVolume(b), 0, 0, nil, codes.AlreadyExists},
		{"restored", nil, 0, 0, nil, codes.AlreadyExists},
		{"vol-b", fromSnapshot(snapID), 0, 0, nil, codes.AlreadyExists},
		{"restored", fromSnapshot(snapID), 64 << 20, 0, nil, codes.AlreadyExists},
	} {
		_, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: tt.name, VolumeCapabilities: []*csi.VolumeCapability{rw},
			CapacityRange: &csi.CapacityRange{RequiredBytes: tt.required, LimitBytes: tt.limit}, Parameters: tt.params, VolumeContentSource: tt.src})
		if code(err) != tt.want {
			t.Errorf("CreateVolume(%s from %v, %d..%d, %v) = %v, want %v", tt.name, tt.src, tt.required, tt.limit, tt.params, err, tt.want)
		}
	}
	if after := poolState(t, td); after != before {
		t.Errorf("refused requests changed the pool or the state:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// Repeats answer what the first call did.
	again, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-a", SourceVolumeId: a})
	if err != nil || !proto.Equal(again.GetSnapshot(), snap.GetSnapshot()) {
		t.Errorf("CreateSnapshot again = %v, %v; want %v", again, err, snap)
	}
	if v, err := createFrom(td, "restored", fromSnapshot(snapID), 0, nil); err != nil || v.GetCapacityBytes() != 32<<20 {
		t.Errorf("CreateVolume from the snapshot again = %v, %v", v, err)
	}
}

// TestSnapshotPoolFull: with the image pool on a small file system of its own, snapshots,
// restores and clones that need more room than the pool has (less the volumes' promised space)
// are ResourceExhausted, and leave nothing behind.
func TestSnapshotPoolFull(t *testing.T) {
	requireSnapshotTools(t)
	testenv.RequireTool(t, "mcopy")
	dir := t.TempDir()
	pool := filepath.Join(dir, "pool")
	if err := os.MkdirAll(pool, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", pool, "tmpfs", 0, "size=96m"); err != nil {
		t.Fatalf("mount a tmpfs for the pool: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(pool, unix.MNT_DETACH) })
	td := startDriver(t, dir, nil)
	ctx := context.Background()
	src := createVolume(t, td, "full", nil)
	data := filepath.Join(dir, "data.bin")
	if err := os.WriteFile(data, randomData(20<<20, 2), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "mcopy", "-i", filepath.Join(pool, "full.img"), data, "::/DATA.BIN")
	snap, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "fits", SourceVolumeId: src})
	if err != nil {
		t.Fatalf("a snapshot with room for it: %v", err)
	}
	// Promise all but 8 MiB of what is left to a new volume: less than any copy needs.
	capResp, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{volume.ParamFATType: "16"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "filler", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: capResp.GetAvailableCapacity() - 8<<20}, Parameters: map[string]string{volume.ParamFATType: "16"}}); err != nil {
		t.Fatal(err)
	}
	before := poolState(t, td)
	if _, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "too-many", SourceVolumeId: src}); code(err) != codes.ResourceExhausted {
		t.Errorf("a snapshot of 20 MiB into 8 MiB of room = %v, want ResourceExhausted", err)
	}
	if _, err := createFrom(td, "restore", fromSnapshot(snap.GetSnapshot().GetSnapshotId()), 0, nil); code(err) != codes.ResourceExhausted {
		t.Errorf("a restore of 32 MiB into 8 MiB of room = %v, want ResourceExhausted", err)
	}
	if _, err := createFrom(td, "clone", fromVolume(src), 0, nil); code(err) != codes.ResourceExhausted {
		t.Errorf("a clone of 32 MiB into 8 MiB of room = %v, want ResourceExhausted", err)
	}
	if after := poolState(t, td); after != before {
		t.Errorf("refused requests changed the pool or the state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestSnapshotUSB: a snapshot of a USB stick in use is a backup of it in the image pool (and so
// is a clone into the image pool): judged by fsck.fat and mtools as an image volume's is. It
// restores into an image volume and onto another stick, the smallest free one that holds it,
// whole (fsck.fat -n and mtools on the device); a restore that no free stick can hold is
// ResourceExhausted and one that would adopt a stick's own files InvalidArgument, touching no
// stick.
func TestSnapshotUSB(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	fake.Add(t, 48<<20, "Fake", "Stick", "BACKUP01")
	target := fake.Add(t, 64<<20, "Fake", "Stick", "RESTORE1")
	small := fake.Add(t, 32<<20, "Fake", "Stick", "SMALL001")
	td := startDriver(t, "", withUSB(fake))
	ctx := context.Background()
	dir := t.TempDir()
	v, err := usbVolume(t, td, "stick", 40<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := v.GetVolumeId()
	mnt := stageAndPublish(t, td, src, filepath.Join(dir, "stick"))
	data := randomData(2<<20+77, 3)
	writeSynced(t, filepath.Join(mnt, "DATA.BIN"), string(data))
	w := startWriter(t, filepath.Join(mnt, "log.txt"))
	waitRecords(t, w, 20)
	beforeSnap, _ := w.records()
	snap, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "stick-backup", SourceVolumeId: src})
	if err != nil {
		t.Fatal(err)
	}
	afterSnap, _ := w.records()
	if _, err := createFrom(td, "stick-clone", fromVolume(src), 0, map[string]string{volume.ParamPool: volume.PoolImage}); err != nil {
		t.Fatal(err)
	}
	afterClone, _ := w.records()
	waitRecords(t, w, afterClone+5)
	w.end(t)
	unpublishAndUnstage(t, td, src, filepath.Join(dir, "stick"))

	s := snap.GetSnapshot()
	if !s.GetReadyToUse() || s.GetSizeBytes() != 48<<20 || s.GetSourceVolumeId() != src {
		t.Errorf("backup %v: want ready, 48 MiB, of %s", s, src)
	}
	backup := snapshotPath(td, "stick-backup")
	if st, err := os.Stat(backup); err != nil || st.Size() != 48<<20 {
		t.Fatalf("backup image: %v, %v; want 48 MiB", st, err)
	}
	log := checkCopyImage(t, backup, data, beforeSnap, afterSnap+1)
	checkCopyImage(t, filepath.Join(td.dir, "pool", "stick-clone.img"), data, afterSnap, afterClone+1)

	// Into the image pool.
	iv, err := createFrom(td, "image-from-stick", fromSnapshot(s.GetSnapshotId()), 0, map[string]string{volume.ParamPool: volume.PoolImage})
	if err != nil {
		t.Fatal(err)
	}
	if iv.GetCapacityBytes() != 48<<20 || !strings.HasPrefix(iv.GetVolumeId(), "image:") {
		t.Errorf("restored into the image pool: %v", iv)
	}
	if got := checkCopyImage(t, filepath.Join(td.dir, "pool", "image-from-stick.img"), data, beforeSnap, afterSnap+1); !bytes.Equal(got, log) {
		t.Error("the restored image's log.txt differs from the backup's")
	}
	it := stageAndPublish(t, td, iv.GetVolumeId(), filepath.Join(dir, "image"))
	if got, err := os.ReadFile(filepath.Join(it, "DATA.BIN")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("DATA.BIN through the restored image's mount: %d bytes, %v", len(got), err)
	}
	unpublishAndUnstage(t, td, iv.GetVolumeId(), filepath.Join(dir, "image"))

	// Refusals touch no stick.
	smallBefore, targetBefore := stickDigest(t, small.Loop), stickDigest(t, target.Loop)
	usb := map[string]string{volume.ParamPool: volume.PoolUSB}
	if _, err := createFrom(td, "adopting", fromSnapshot(s.GetSnapshotId()), 0, map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamAdopt: "true"}); code(err) != codes.InvalidArgument {
		t.Errorf("a restore that adopts = %v, want InvalidArgument", err)
	}
	if _, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "too-small", VolumeCapabilities: []*csi.VolumeCapability{rw}, Parameters: usb,
		CapacityRange: &csi.CapacityRange{LimitBytes: 32 << 20}, VolumeContentSource: fromSnapshot(s.GetSnapshotId())}); code(err) != codes.OutOfRange {
		t.Errorf("a restore of 48 MiB within 32 MiB = %v, want OutOfRange", err)
	}
	if _, err := createFrom(td, "none-fits", fromSnapshot(s.GetSnapshotId()), 96<<20, usb); code(err) != codes.ResourceExhausted {
		t.Errorf("a restore onto a stick of 96 MiB = %v, want ResourceExhausted", err)
	}
	if stickDigest(t, small.Loop) != smallBefore || stickDigest(t, target.Loop) != targetBefore {
		t.Error("a refused restore changed a stick")
	}

	// Onto a stick: the smallest that holds it.
	sv, err := createFrom(td, "stick-from-backup", fromSnapshot(s.GetSnapshotId()), 0, usb)
	if err != nil {
		t.Fatal(err)
	}
	if sv.GetCapacityBytes() != 64<<20 || !strings.HasPrefix(sv.GetVolumeId(), "usb:") {
		t.Errorf("restored onto a stick: %v; want the 64 MiB stick", sv)
	}
	if got := checkCopyImage(t, target.Loop, data, beforeSnap, afterSnap+1); !bytes.Equal(got, log) {
		t.Error("the restored stick's log.txt differs from the backup's")
	}
	if stickDigest(t, small.Loop) != smallBefore {
		t.Error("the restore changed the stick too small for it")
	}
	if _, err := createFrom(td, "no-stick-left", fromSnapshot(s.GetSnapshotId()), 0, usb); code(err) != codes.ResourceExhausted {
		t.Errorf("a restore with no free stick that holds it = %v, want ResourceExhausted", err)
	}
	st := stageAndPublish(t, td, sv.GetVolumeId(), filepath.Join(dir, "restored-stick"))
	if got, err := os.ReadFile(filepath.Join(st, "log.txt")); err != nil || !bytes.Equal(got, log) {
		t.Errorf("log.txt through the restored stick's mount: %d bytes, %v; want the backup's %d", len(got), err, len(log))
	}
	unpublishAndUnstage(t, td, sv.GetVolumeId(), filepath.Join(dir, "restored-stick"))
}

// xfsPool mounts a fresh XFS with reflinks, on a loop device, at dir/pool.
func xfsPool(t *testing.T, dir string) {
	t.Helper()
	back := filepath.Join(dir, "xfs.img")
	if err := os.WriteFile(back, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(back, 512<<20); err != nil {
		t.Fatal(err)
	}
	loop := strings.TrimSpace(run(t, "losetup", "--find", "--show", back))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
	run(t, "mkfs.xfs", "-q", "-m", "reflink=1", loop)
	pool := filepath.Join(dir, "pool")
	if err := os.MkdirAll(pool, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(loop, pool, "xfs", 0, ""); err != nil {
		t.Fatalf("mount the XFS pool: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(pool, unix.MNT_DETACH) })
}

// TestSnapshotReflink: on a pool whose file system can share extents (XFS with reflinks), a
// snapshot and a clone of a volume in use and a restore are reflinks: the three copies of 20 MiB
// of data take next to no room, and each is judged whole by fsck.fat and mtools as a sparse
// copy is.
func TestSnapshotReflink(t *testing.T) {
	requireSnapshotTools(t)
	testenv.RequireLoop(t)
	testenv.RequireTool(t, "mkfs.xfs", "losetup")
	dir := t.TempDir()
	xfsPool(t, dir)
	td := startDriver(t, dir, nil)
	ctx := context.Background()
	src := createVolume(t, td, "source", nil)
	mnt := stageAndPublish(t, td, src, filepath.Join(dir, "source"))
	data := randomData(20<<20, 4)
	writeSynced(t, filepath.Join(mnt, "DATA.BIN"), string(data))
	w := startWriter(t, filepath.Join(mnt, "log.txt"))
	waitRecords(t, w, 20)
	free := poolFree(t, td)
	beforeSnap, _ := w.records()
	snap, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: src})
	if err != nil {
		t.Fatal(err)
	}
	afterSnap, _ := w.records()
	if _, err := createFrom(td, "clone", fromVolume(src), 0, nil); err != nil {
		t.Fatal(err)
	}
	afterClone, _ := w.records()
	if _, err := createFrom(td, "restored", fromSnapshot(snap.GetSnapshot().GetSnapshotId()), 0, nil); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, w, afterClone+5)
	w.end(t)
	if took := free - poolFree(t, td); took > 8<<20 {
		t.Errorf("three copies of a volume holding 20 MiB took %d bytes of the pool: they do not share its extents", took)
	}
	checkCopyImage(t, snapshotPath(td, "snap"), data, beforeSnap, afterSnap+1)
	checkCopyImage(t, filepath.Join(dir, "pool", "clone.img"), data, afterSnap, afterClone+1)
	checkCopyImage(t, filepath.Join(dir, "pool", "restored.img"), data, beforeSnap, afterSnap+1)
	unpublishAndUnstage(t, td, src, filepath.Join(dir, "source"))
}

// TestSnapshotsAcrossRestart: snapshots are in the node-local state: a new driver process lists
// them as they were and restores them; what a crash left of a snapshot being taken (its record,
// not ready, and its half-made copy) is gone at start.
func TestSnapshotsAcrossRestart(t *testing.T) {
	requireSnapshotTools(t)
	td := startDriver(t, "", nil)
	ctx := context.Background()
	src := createVolume(t, td, "vol", nil)
	snap, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "kept", SourceVolumeId: src})
	if err != nil {
		t.Fatal(err)
	}
	td.shutdown(t)

	// A crash in the middle of taking another one.
	statePath := filepath.Join(td.dir, "state", volume.StateFile)
	state, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	half := `"snapshots": {
    "half": {"id": "snapshot:` + testNode + `:half", "name": "half", "source": "` + src + `", "size": 33554432, "created": "2026-01-01T00:00:00Z", "ready": false},`
	if !strings.Contains(string(state), `"snapshots": {`) {
		t.Fatalf("no snapshots in the state:\n%s", state)
	}
	state = []byte(strings.Replace(string(state), `"snapshots": {`, half, 1))
	if err := os.WriteFile(statePath, state, 0o600); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(td.dir, "pool", "snapshots", ".half.img.creating")
	if err := os.WriteFile(leftover, []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}

	td = startDriver(t, td.dir, nil)
	snaps, _ := listSnapshotsAll(t, td, &csi.ListSnapshotsRequest{})
	if len(snaps) != 1 || !proto.Equal(snaps[0], snap.GetSnapshot()) {
		t.Errorf("after a restart: %v; want only %v", snaps, snap.GetSnapshot())
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the half-made copy: %v", err)
	}
	if _, err := createFrom(td, "restored", fromSnapshot(snap.GetSnapshot().GetSnapshotId()), 0, nil); err != nil {
		t.Fatal(err)
	}
	if ok, out := fsckClean(t, filepath.Join(td.dir, "pool", "restored.img")); !ok {
		t.Errorf("restored after a restart:\n%s", out)
	}
}

// TestDeleteSnapshotInUse: while a volume is restored from a snapshot, the snapshot is in use:
// DeleteSnapshot is FailedPrecondition and leaves it; once the restore is done it deletes it,
// and the restored volume is whole.
func TestDeleteSnapshotInUse(t *testing.T) {
	requireSnapshotTools(t)
	testenv.RequireTool(t, "mcopy")
	td := startDriver(t, "", nil)
	ctx := context.Background()
	resp, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "big", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 320 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(data, randomData(256<<20, 5), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "mcopy", "-i", filepath.Join(td.dir, "pool", "big.img"), data, "::/DATA.BIN")
	snap, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "big-snap", SourceVolumeId: resp.GetVolume().GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	id := snap.GetSnapshot().GetSnapshotId()
	restored := make(chan error, 1)
	go func() {
		_, err := createFrom(td, "restored", fromSnapshot(id), 0, nil)
		restored <- err
	}()
	// The restore's copy is under way once its file is there.
	copying := filepath.Join(td.dir, "pool", ".restored.img.creating")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(copying); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restore's copy did not start")
		}
	}
	if _, err := td.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id}); code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteSnapshot while a volume is restored from it = %v, want FailedPrecondition", err)
	}
	if err := <-restored; err != nil {
		t.Fatal(err)
	}
	if _, err := td.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
		t.Fatalf("DeleteSnapshot after the restore: %v", err)
	}
	img := filepath.Join(td.dir, "pool", "restored.img")
	if ok, out := fsckClean(t, img); !ok {
		t.Errorf("the restored volume:\n%s", out)
	}
	want, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := mtype(t, img, "DATA.BIN"); !bytes.Equal(got, want) {
		t.Errorf("DATA.BIN of the restored volume: %d bytes, not the %d written", len(got), len(want))
	}
}

// TestMounterDeathVoidsSnapshot: with mounter processes, a mounter killed while it holds its
// volume for a snapshot's copy takes its hold with it; the copy is void: CreateSnapshot fails
// and leaves no snapshot, and the volume is served again at the next publish with everything
// fsync'ed before.
func TestMounterDeathVoidsSnapshot(t *testing.T) {
	requireSnapshotTools(t)
	testenv.RequireTool(t, "mcopy")
	td := startDriver(t, "", withMounters)
	ctx := context.Background()
	dir := t.TempDir()
	resp, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "big", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 320 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	data := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(data, randomData(256<<20, 6), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "mcopy", "-i", filepath.Join(td.dir, "pool", "big.img"), data, "::/DATA.BIN")
	mnt := stageAndPublish(t, td, id, dir)
	writeSynced(t, filepath.Join(mnt, "SYNCED.TXT"), "fsync'ed before the snapshot\n")
	mr := stagedMounter(t, td.dir, "big")

	result := make(chan error, 1)
	go func() {
		_, err := td.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "void", SourceVolumeId: id})
		result <- err
	}()
	// The copy starts writing once the volume is held.
	copying := filepath.Join(td.dir, "pool", "snapshots", ".void.img.creating")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		var st unix.Stat_t
		if unix.Stat(copying, &st) == nil && st.Blocks > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the snapshot's copy did not start")
		}
	}
	if err := unix.Kill(mr.PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-result; err == nil {
		t.Fatal("a snapshot whose mounter died during its hold succeeded")
	} else if c := code(err); c != codes.Unavailable {
		t.Errorf("CreateSnapshot = %v, want Unavailable", err)
	}
	if snaps, _ := listSnapshotsAll(t, td, &csi.ListSnapshotsRequest{}); len(snaps) != 0 {
		t.Errorf("snapshots after the void one: %v", snaps)
	}
	if entries, err := os.ReadDir(filepath.Join(td.dir, "pool", "snapshots")); err != nil || len(entries) != 0 {
		t.Errorf("the snapshots directory holds %v (%v)", entries, err)
	}
	// Served again at the next publish, with what was fsync'ed.
	if _, err := td.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: filepath.Join(dir, "target")}); err != nil {
		t.Fatal(err)
	}
	mnt = stageAndPublish(t, td, id, dir)
	if got, err := os.ReadFile(filepath.Join(mnt, "SYNCED.TXT")); err != nil || string(got) != "fsync'ed before the snapshot\n" {
		t.Errorf("SYNCED.TXT after the mounter's death: %q, %v", got, err)
	}
	unpublishAndUnstage(t, td, id, dir)
}

// TestDriverDeathEndsHold: a driver process SIGKILLed while its mounter holds a volume for a
// snapshot's copy does not leave the volume held (for the hold's limit of minutes): the hold
// ends with the driver's connection and the application writing to the volume goes on at once;
// the next driver adopts the mounter and has no trace of the snapshot.
func TestDriverDeathEndsHold(t *testing.T) {
	requireSnapshotTools(t)
	testenv.RequireTool(t, "mcopy")
	dir := t.TempDir()
	ctx := context.Background()
	c := startChild(t, dir, withMounters)
	resp, err := c.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "big", VolumeCapabilities: []*csi.VolumeCapability{rwCap()},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 320 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	data := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(data, randomData(256<<20, 7), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "mcopy", "-i", filepath.Join(dir, "pool", "big.img"), data, "::/DATA.BIN")
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	if _, err := c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rwCap()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rwCap()}); err != nil {
		t.Fatal(err)
	}
	mr := stagedMounter(t, dir, "big")
	t.Cleanup(func() { unix.Kill(mr.PID, unix.SIGKILL) })
	w := startWriter(t, filepath.Join(target, "log.txt"))
	waitRecords(t, w, 10)

	go c.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "cut", SourceVolumeId: id})
	copying := filepath.Join(dir, "pool", "snapshots", ".cut.img.creating")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		var st unix.Stat_t
		if unix.Stat(copying, &st) == nil && st.Blocks > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the snapshot's copy did not start")
		}
	}
	n1, _ := w.records()
	time.Sleep(50 * time.Millisecond)
	n2, _ := w.records()
	if n2 > n1+1 {
		t.Errorf("the writer did %d records while the volume was held", n2-n1)
	}
	c.end(t, syscall.SIGKILL)
	killed := time.Now()
	waitRecords(t, w, n2+5)
	if d := time.Since(killed); d > 5*time.Second {
		t.Errorf("the writer waited %v after the driver's death", d)
	}
	n := w.end(t)
	checkRecords(t, filepath.Join(target, "log.txt"), n)

	c = startChild(t, dir, withMounters)
	if again := stagedMounter(t, dir, "big"); again.PID != mr.PID || !alive(mr.PID) {
		t.Errorf("the mounter %d was not adopted (now %d)", mr.PID, again.PID)
	}
	snaps, err := c.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil || len(snaps.GetEntries()) != 0 {
		t.Errorf("snapshots after the driver died taking one: %v, %v", snaps, err)
	}
	if _, err := os.Stat(copying); !os.IsNotExist(err) {
		t.Errorf("the half-made copy: %v", err)
	}
	if _, err := c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, mr.PID)
	if ok, out := fsckClean(t, filepath.Join(dir, "pool", "big.img")); !ok {
		t.Errorf("fsck.fat -n after unstaging:\n%s", out)
	}
	c.end(t, syscall.SIGTERM)
}
