package e2e

import "testing"

// TestClone clones a claim while a pod appends fsync'ed records to it (a claim with the source
// claim as dataSource), and checks the clone: on this node, a volume of its own with the
// source's files and checksums and every record reported before the clone was asked for. The
// writer sees no error.
func TestClone(t *testing.T) {
	e := need(t)
	e.needClaim(t, e.claims.clones, "clones (CLONE_VOLUME)")
	ns := e.namespace(t)

	e.applyObjects(t, claimObject(ns, "src", imageClass, "64Mi"))
	w := e.startWriter(t, ns, "writer", "src")
	src := e.waitClaimBound(t, ns, "src")
	e.writeSourceFiles(t, ns, "writer")
	acked := w.waitReported(t, 100)

	// The provisioner wants the clone at least as large as the source's request.
	e.applyObjects(t, claimFrom(ns, "copy", imageClass, "64Mi", "PersistentVolumeClaim", "src"))
	e.startPod(t, ns, podSpec{name: "reader", volumes: []podVolume{{claim: "copy", path: "/data"}}})
	clone := e.waitClaimBound(t, ns, "copy")
	t.Logf("clone %s of %s made after record %d was reported", clone.Spec.CSI.VolumeHandle, src.Spec.CSI.VolumeHandle, acked)
	e.checkCopy(t, ns, src, clone, acked, "the clone")

	n := w.stop(t)
	t.Logf("the writer wrote %d records without an error, across the clone", n)
}
