package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/internal/judge"
)

// recordLen is the size of one record of the sync test: the writer appends them whole.
const recordLen = 64

// record is the n-th record (from 1) the writer appends.
func record(n int) string {
	return fmt.Sprintf("record %08d abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU\n", n)
}

// syncWriter appends records to /data/log, fsyncs after each and only then prints its number.
const syncWriter = `i=0
while :; do
	i=$((i+1))
	printf 'record %08d abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU\n' "$i" >> /data/log || exit 1
	sync /data/log || exit 1
	echo "$i"
done`

// TestSyncModeSurvivesKill kills a pod writing to a volume of mode sync and checks that every
// record it had fsync'ed and reported is on the volume, byte for byte: on the node's image while
// it runs, and after the kill on the image and for the next pod.
func TestSyncModeSurvivesKill(t *testing.T) {
	e := need(t)
	if len(record(1)) != recordLen {
		t.Fatalf("record length %d", len(record(1)))
	}
	ns := e.namespace(t)
	class := e.storageClass(t, ns, "sync", map[string]string{"pool": "image", "mode": "sync"})
	e.applyObjects(t, claimObject(ns, "log", class, "32Mi"))
	e.startPod(t, ns, podSpec{name: "writer", volumes: []podVolume{{claim: "log", path: "/data"}}, script: syncWriter})
	v := e.waitClaimBound(t, ns, "log")
	img, err := e.imageFile(v.Spec.CSI.VolumeHandle)
	if err != nil {
		t.Fatal(err)
	}
	requireMounted(t, img)

	// Follow the writer's reports; kill the pod once it has reported enough records.
	const before = 200
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, stream, err := e.follow(ctx, "logs", "-f", "-n", ns, "writer")
	if err != nil {
		t.Fatal(err)
	}
	reported := make(chan int)
	go func() {
		defer close(reported)
		sc := bufio.NewScanner(stream)
		for sc.Scan() {
			if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
				reported <- n
			}
		}
	}()
	acked := 0
	for acked < before {
		n, ok := <-reported
		if !ok {
			e.dump(t, ns)
			t.Fatalf("the writer's log ended after record %d: %v", acked, cmd.Wait())
		}
		acked = n
	}
	// While the writer still runs, the image on the node already holds what it reported: an
	// fsync'ed record is on the device, not only in the driver.
	live, err := mtoolsRead(img, "log")
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, "the node's image while the writer runs", live, acked)
	e.kubectlT(t, "delete", "pod", "-n", ns, "writer", "--grace-period=0", "--force")
	// Reports already on their way were fsync'ed before the kill too.
	for n := range reported {
		acked = max(acked, n)
	}
	_ = cmd.Wait() // the stream ends with the pod, as an error
	t.Logf("the writer reported %d fsync'ed records before it was killed", acked)

	// The kubelet unstages the volume once the killed container is gone; the next pod stages
	// it again, so what it reads is what the volume held, not what a cache of the old mount did.
	e.waitUnstaged(t, ns, v.Spec.CSI.VolumeHandle, img)
	if err := judge.Check(img); err != nil {
		t.Errorf("image %s after the kill: %v", img, err)
	}
	onNode, err := mtoolsRead(img, "log")
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, "the node's image (mtype)", onNode, acked)

	e.startPod(t, ns, podSpec{name: "reader", volumes: []podVolume{{claim: "log", path: "/data"}}})
	inPod := e.sh(t, ns, "reader", "cat /data/log")
	checkRecords(t, "the next pod", []byte(inPod), acked)
	if inPod != string(onNode) {
		t.Errorf("the next pod reads %d bytes, mtype %d bytes of the same file", len(inPod), len(onNode))
	}
}

// checkRecords checks that log holds records 1 to at least acked, each exact, and after them at
// most a beginning of the next one (a write cut by the kill).
func checkRecords(t *testing.T, where string, log []byte, acked int) {
	t.Helper()
	whole := len(log) / recordLen
	if whole < acked {
		t.Errorf("%s: %d whole records, but %d were fsync'ed and reported", where, whole, acked)
	}
	for n := 1; n <= whole; n++ {
		if got := log[(n-1)*recordLen : n*recordLen]; string(got) != record(n) {
			t.Errorf("%s: record %d is %q, want %q", where, n, got, record(n))
			return
		}
	}
	if tail := log[whole*recordLen:]; !bytes.HasPrefix([]byte(record(whole+1)), tail) {
		t.Errorf("%s: after %d records %q, not a beginning of record %d", where, whole, tail, whole+1)
	}
}
