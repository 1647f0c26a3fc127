package e2e

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/internal/judge"
)

// TestOnlineExpansion grows a claim from 64Mi to 1Gi while a pod appends fsync'ed records to it:
// the claim's status reaches the new size, df in the pod shows it and the pod can fill past the
// old size, the writer sees no error throughout, and afterwards every record is there, for the
// next pod and on the node's image, which fsck.fat and mtools accept at its new size.
func TestOnlineExpansion(t *testing.T) {
	e := need(t)
	e.needClaim(t, e.claims.onlineExpansion, "online expansion")
	ns := e.namespace(t)
	// maxSize: the file system is made with room for the FAT to cover 1Gi.
	class := e.growableClass(t, ns, "grow", map[string]string{"pool": "image", "maxSize": "1Gi"})
	e.applyObjects(t, claimObject(ns, "data", class, "64Mi"))
	w := e.startWriter(t, ns, "writer", "data")
	v := e.waitClaimBound(t, ns, "data")
	img, err := e.imageFile(v.Spec.CSI.VolumeHandle)
	if err != nil {
		t.Fatal(err)
	}
	requireMounted(t, img)

	before := dfBytes(t, e, ns, "writer")
	if before <= 0 || before > 64<<20 {
		t.Fatalf("df in the pod shows %d bytes before the growth, want at most 64 MiB", before)
	}
	reported := w.waitReported(t, 100)
	t.Logf("df: %d bytes; the writer has reported %d records: growing the claim", before, reported)

	e.kubectlT(t, "patch", "pvc", "-n", ns, "data", "--type=merge",
		"-p", `{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`)
	e.waitFor(t, ns, "claim data at 1Gi", 3*time.Minute, func() (bool, error) {
		var c pvc
		if err := e.getJSON(&c, "pvc", "-n", ns, "data"); err != nil {
			return false, err
		}
		got, err := parseQuantity(c.Status.Capacity["storage"])
		if err != nil {
			return false, err
		}
		if got == 1<<30 {
			return true, nil
		}
		// The writer must run on all the while; a failed write ends it.
		var p pod
		if err := e.getJSON(&p, "pod", "-n", ns, "writer"); err != nil {
			return false, err
		}
		if p.Status.Phase != "Running" {
			return false, fmt.Errorf("%w: the writer is %s during the growth", errGiveUp, p.Status.Phase)
		}
		return false, fmt.Errorf("claim data has capacity %s", c.Status.Capacity["storage"])
	})

	// The grown file system covers 1 GiB but for its reserved sectors and FATs: two FAT32 FATs
	// of 512-byte clusters, the most a 64Mi volume may have, take 16 MiB of 1 GiB.
	after := dfBytes(t, e, ns, "writer")
	if after < 1<<30-32<<20 || after > 1<<30 {
		t.Errorf("df in the pod shows %d bytes after the growth, want 1 GiB less the FATs' own sectors", after)
	}
	// Space past the old size is there to use: 100 MiB more than the volume had at all.
	e.sh(t, ns, "writer", "dd if=/dev/zero of=/data/big bs=1048576 count=100 2>/dev/null && sync /data/big")
	wantBig := sha256Hex(make([]byte, 100<<20))
	if got := e.sha256InPod(t, ns, "writer", "/data/big"); got != wantBig {
		t.Errorf("100 MiB of zeros written after the growth read back with sha256 %s, want %s", got, wantBig)
	}
	w.waitReported(t, w.last+100)
	n := w.stop(t)
	t.Logf("df: %d bytes after the growth; the writer wrote %d records without an error", after, n)

	e.deletePod(t, ns, "writer")
	e.startPod(t, ns, podSpec{name: "reader", volumes: []podVolume{{claim: "data", path: "/data"}}})
	checkLog(t, "the next pod", []byte(e.sh(t, ns, "reader", "cat /data/log")), n)
	e.deletePod(t, ns, "reader")

	e.waitUnstaged(t, ns, v.Spec.CSI.VolumeHandle, img)
	if st, err := os.Stat(img); err != nil {
		t.Error(err)
	} else if st.Size() != 1<<30 {
		t.Errorf("image %s is %d bytes, want 1 GiB", img, st.Size())
	}
	if err := judge.Check(img); err != nil {
		t.Errorf("grown image %s: %v", img, err)
	}
	onNode, err := mtoolsRead(img, "log")
	if err != nil {
		t.Fatal(err)
	}
	checkLog(t, "the node's image (mtype)", onNode, n)
	big, err := mtoolsRead(img, "big")
	if err != nil {
		t.Fatal(err)
	}
	if len(big) != 100<<20 || !bytes.Equal(big, make([]byte, len(big))) {
		t.Errorf("mtype big: %d bytes, not 100 MiB of zeros", len(big))
	}
}

// dfBytes is the size of the file system at /data as df in the pod reports it. -P keeps each
// file system on one line; the size is the fifth field from the end, whatever the source's name.
func dfBytes(t *testing.T, e *environment, ns, pod string) int64 {
	t.Helper()
	out := e.sh(t, ns, pod, "df -P -k /data")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	if len(fields) < 6 || fields[len(fields)-1] != "/data" {
		t.Fatalf("df -P -k /data: %q", out)
	}
	kib, err := strconv.ParseInt(fields[len(fields)-5], 10, 64)
	if err != nil {
		t.Fatalf("df -P -k /data: %q: %v", out, err)
	}
	return kib << 10
}
