package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// snapshotClass is the chart's VolumeSnapshotClass, which the tests install.
const snapshotClass = "csi-fat"

// managedByLabel is what the snapshot controller, with distributed snapshotting, sets on a
// content to the node of its volume; that node's csi-snapshotter takes only those.
const managedByLabel = "snapshot.storage.kubernetes.io/managed-by"

// sourceFiles are the files a test writes to a source volume before it snapshots or clones it.
var sourceFiles = map[string][]byte{
	"before.bin":                  testData(3, 2<<20+77),
	"A long name, before it.txt":  []byte("written and fsync'ed before the copy\n"),
	"sub/dir/nested.dat":          testData(4, 4097),
	"sub/empty-before-the-copy.x": nil,
}

// writeSourceFiles writes sourceFiles into /data of a pod, each made durable.
func (e *environment) writeSourceFiles(t *testing.T, ns, pod string) {
	t.Helper()
	e.sh(t, ns, pod, "mkdir -p /data/sub/dir")
	for name, data := range sourceFiles {
		e.writeInPod(t, ns, pod, "/data/"+name, data)
	}
}

// checkSourceFiles checks that a pod reads sourceFiles from /data with their checksums.
func (e *environment) checkSourceFiles(t *testing.T, ns, pod, what string) {
	t.Helper()
	for name, data := range sourceFiles {
		if got, want := e.sha256InPod(t, ns, pod, "/data/"+name), sha256Hex(data); got != want {
			t.Errorf("%s: %s has sha256 %s, the source had %s", what, name, got, want)
		}
	}
}

// TestSnapshotRestore snapshots a volume while a pod appends fsync'ed records to it, restores the
// snapshot into a new claim, and checks what the restored volume holds: the files written before
// the snapshot with their checksums, and every record reported before the snapshot was asked
// for, whole. The writer sees no error; the snapshot is deleted with its VolumeSnapshot.
func TestSnapshotRestore(t *testing.T) {
	e := need(t)
	e.needClaim(t, e.claims.snapshots, "snapshots (CREATE_DELETE_SNAPSHOT)")
	ns := e.namespace(t)
	// Runs before the namespace goes: its snapshots must be deleted on the node while the
	// driver still has them.
	t.Cleanup(func() { e.deleteSnapshots(t, ns) })

	e.applyObjects(t, claimObject(ns, "src", imageClass, "64Mi"))
	w := e.startWriter(t, ns, "writer", "src")
	src := e.waitClaimBound(t, ns, "src")
	e.writeSourceFiles(t, ns, "writer")
	acked := w.waitReported(t, 100)

	snap := object("snapshot.storage.k8s.io/v1", "VolumeSnapshot", ns, "snap")
	snap["spec"] = map[string]any{
		"volumeSnapshotClassName": snapshotClass,
		"source":                  map[string]any{"persistentVolumeClaimName": "src"},
	}
	e.applyObjects(t, snap)
	var vs volumeSnapshot
	e.waitFor(t, ns, "snapshot snap ready", 3*time.Minute, func() (bool, error) {
		vs = volumeSnapshot{}
		if err := e.getJSON(&vs, "volumesnapshot", "-n", ns, "snap"); err != nil {
			return false, err
		}
		if vs.Status == nil {
			return false, fmt.Errorf("snapshot snap has no status")
		}
		if vs.Status.ReadyToUse != nil && *vs.Status.ReadyToUse {
			return true, nil
		}
		if vs.Status.Error != nil {
			return false, fmt.Errorf("snapshot snap: %s", vs.Status.Error.Message)
		}
		return false, fmt.Errorf("snapshot snap is not ready")
	})
	// The volume stays in use: the writer goes on past the snapshot.
	w.waitReported(t, w.last+100)

	// The content is this node's: the controller labelled it, this node's snapshotter took it.
	var content snapshotContent
	e.getJSONT(t, &content, "volumesnapshotcontent", *vs.Status.BoundVolumeSnapshotContentName)
	if got := content.Metadata.Labels[managedByLabel]; got != e.node {
		t.Errorf("content %s labelled %s=%q, want this node %q", content.Metadata.Name, managedByLabel, got, e.node)
	}
	if content.Spec.Driver != driverName || content.Spec.DeletionPolicy != "Delete" {
		t.Errorf("content %s: driver %q, deletion policy %q", content.Metadata.Name, content.Spec.Driver, content.Spec.DeletionPolicy)
	}
	if content.Status == nil || content.Status.SnapshotHandle == nil || *content.Status.SnapshotHandle == "" {
		t.Fatalf("content %s has no snapshot handle: %+v", content.Metadata.Name, content.Status)
	}
	// Its size is the volume's.
	srcBytes, err := parseQuantity(src.Spec.Capacity["storage"])
	if err != nil {
		t.Fatal(err)
	}
	if vs.Status.RestoreSize == nil {
		t.Errorf("snapshot snap has no restore size")
	} else if got, err := parseQuantity(*vs.Status.RestoreSize); err != nil || got != srcBytes {
		t.Errorf("snapshot snap restore size %s (%v), want the volume's %d bytes", *vs.Status.RestoreSize, err, srcBytes)
	}
	t.Logf("snapshot %s of %s taken after record %d was reported", *content.Status.SnapshotHandle, src.Spec.CSI.VolumeHandle, acked)

	e.applyObjects(t, claimFrom(ns, "restored", imageClass, "64Mi", "VolumeSnapshot", "snap"))
	e.startPod(t, ns, podSpec{name: "reader", volumes: []podVolume{{claim: "restored", path: "/data"}}})
	restored := e.waitClaimBound(t, ns, "restored")
	e.checkCopy(t, ns, src, restored, acked, "the restored snapshot")

	n := w.stop(t)
	t.Logf("the writer wrote %d records without an error, across the snapshot", n)
	e.deletePod(t, ns, "reader")
	e.deletePod(t, ns, "writer")
	e.deleteSnapshots(t, ns)
}

// checkCopy checks a volume made from src (restored or cloned) in the pod "reader": on this node,
// a volume of its own, the source's files with their checksums, and the writer's records up to
// at least acked, whole (a record cut by the copy may follow). A file written to the copy does
// not appear in the source.
func (e *environment) checkCopy(t *testing.T, ns string, src, dst pv, acked int, what string) {
	t.Helper()
	e.checkCopyIn(t, ns, "reader", src, dst, acked, what)
}

// checkCopyIn is checkCopy with the copy mounted in the pod reader: on the source's node.
func (e *environment) checkCopyIn(t *testing.T, ns, reader string, src, dst pv, acked int, what string) {
	t.Helper()
	if got, want := dst.nodeAffinity(), src.nodeAffinity(); got != want || want == "" {
		t.Errorf("%s: volume %s node affinity %q, want %q", what, dst.Metadata.Name, got, want)
	}
	if dst.Spec.CSI.VolumeHandle == src.Spec.CSI.VolumeHandle {
		t.Fatalf("%s has the source's volume handle %s", what, dst.Spec.CSI.VolumeHandle)
	}
	e.checkSourceFiles(t, ns, reader, what)
	checkRecords(t, what, []byte(e.sh(t, ns, reader, "cat /data/log")), acked)
	e.sh(t, ns, reader, "echo copy > /data/only-in-the-copy && sync /data/only-in-the-copy")
	if out := e.sh(t, ns, "writer", "ls /data"); strings.Contains(out, "only-in-the-copy") {
		t.Errorf("a file written to %s appears in the source: %q", what, out)
	}
}

// deleteSnapshots deletes the VolumeSnapshots of a namespace and waits until their contents,
// and with them the snapshots on the node, are gone.
func (e *environment) deleteSnapshots(t *testing.T, ns string) {
	t.Helper()
	if !e.claims.snapshots {
		return
	}
	if _, err := e.kubectlErr("delete", "volumesnapshots", "-n", ns, "--all", "--timeout=3m"); err != nil {
		t.Errorf("deleting the snapshots of %s: %v", ns, err)
	}
	if err := e.waitSnapshotsGone(func(c *snapshotContent) bool { return c.Spec.VolumeSnapshotRef.Namespace == ns }); err != nil {
		e.dump(t, ns)
		t.Errorf("snapshots of namespace %s: %v", ns, err)
	}
}
