package e2e

import (
	"strings"
	"testing"
)

// TestReadOnly checks that a pod mounting a claim read-only (persistentVolumeClaim.readOnly, so
// the driver publishes it read-only) reads the volume's files and gets EROFS for every change.
func TestReadOnly(t *testing.T) {
	e := need(t)
	ns := e.namespace(t)
	e.applyObjects(t, claimObject(ns, "data", imageClass, "16Mi"))
	e.startPod(t, ns, podSpec{name: "writer", volumes: []podVolume{{claim: "data", path: "/data"}}})
	e.waitClaimBound(t, ns, "data")
	e.sh(t, ns, "writer", "echo kept > /data/kept.txt && mkdir /data/dir && sync /data/kept.txt")
	e.deletePod(t, ns, "writer")

	e.startPod(t, ns, podSpec{name: "reader", volumes: []podVolume{{claim: "data", path: "/data", readOnly: true}}})
	if got := e.sh(t, ns, "reader", "cat /data/kept.txt"); got != "kept\n" {
		t.Errorf("read %q from the read-only volume, want %q", got, "kept\n")
	}
	changes := map[string]string{
		"create":   "echo x > /data/new.txt",
		"append":   "echo x >> /data/kept.txt",
		"remove":   "rm /data/kept.txt",
		"mkdir":    "mkdir /data/newdir",
		"rmdir":    "rmdir /data/dir",
		"rename":   "mv /data/kept.txt /data/moved.txt",
		"truncate": "truncate -s 0 /data/kept.txt",
	}
	for what, cmd := range changes {
		// The shell reports a failed redirection itself: take its stderr too.
		out := e.sh(t, ns, "reader", "("+cmd+") 2>&1; echo rc=$?")
		if strings.HasSuffix(out, "rc=0\n") || !strings.Contains(out, "Read-only file system") {
			t.Errorf("%s (%s) on the read-only volume: %q, want EROFS", what, cmd, out)
		}
	}
	if got := e.sh(t, ns, "reader", "cat /data/kept.txt; ls /data"); got != "kept\ndir\nkept.txt\n" {
		t.Errorf("after the refused changes the volume holds %q", got)
	}
}
