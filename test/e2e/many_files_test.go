package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// manyFiles is what TestManyFiles makes: 500,000 empty files, 500 to a directory, in a directory
// of their own (a FAT16 root holds 512 entries at most). Empty, so that they fit the tests' pool
// (a 2 GiB tmpfs) twice, with the snapshot's copy: an empty file takes a directory entry and no
// cluster, and what the server holds per file does not depend on its size.
const (
	manyFilesDirs   = 1000
	manyFilesPerDir = 500
	manyFilesClaim  = "512Mi"
)

// mounterState is the part of a mounter pod's status that says whether its container was
// killed: with restart policy Never an OOM kill leaves it terminated, reason OOMKilled.
type mounterState struct {
	Metadata objectMeta `json:"metadata"`
	Status   struct {
		Phase             string `json:"phase"`
		ContainerStatuses []struct {
			RestartCount int `json:"restartCount"`
			State        struct {
				Terminated *struct {
					Reason string `json:"reason"`
				} `json:"terminated"`
			} `json:"state"`
			LastState struct {
				Terminated *struct {
					Reason string `json:"reason"`
				} `json:"terminated"`
			} `json:"lastState"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

// requireNotKilled fails the test unless the mounter pod uid still runs its first container.
func (e *environment) requireNotKilled(t *testing.T, name, uid, when string) {
	t.Helper()
	var m mounterState
	e.getJSONT(t, &m, "pod", "-n", releaseNS, name)
	if m.Metadata.UID != uid || m.Status.Phase != "Running" {
		t.Fatalf("%s: mounter pod %s is %s (uid %s, was %s)", when, name, m.Status.Phase, m.Metadata.UID, uid)
	}
	for _, c := range m.Status.ContainerStatuses {
		for _, term := range []*struct {
			Reason string `json:"reason"`
		}{c.State.Terminated, c.LastState.Terminated} {
			if term != nil {
				t.Fatalf("%s: mounter pod %s's container terminated: %s", when, name, term.Reason)
			}
		}
		if c.RestartCount != 0 {
			t.Fatalf("%s: mounter pod %s's container restarted %d times", when, name, c.RestartCount)
		}
	}
}

// TestManyFiles: a claim's pod creates 500,000 files (1,000 directories of 500) and walks them
// (find, stat and read every one) through a mounter pod held to the chart's default memory
// limit: the mounter pod is never OOM killed (kubelet's status of its container, and the same
// process serves throughout), the pod sees no error, and the mounter's peak resident memory is
// logged. Then a claim restored from a snapshot of the volume is staged, which checks it, and
// lists the same files.
func TestManyFiles(t *testing.T) {
	e := need(t)
	e.needClaim(t, e.claims.snapshots, "snapshots (CREATE_DELETE_SNAPSHOT)")
	ns := e.namespace(t)
	t.Cleanup(func() { e.deleteSnapshots(t, ns) })

	e.applyObjects(t, claimObject(ns, "many", imageClass, manyFilesClaim))
	e.startPod(t, ns, podSpec{name: "maker", volumes: []podVolume{{claim: "many", path: "/data"}}})
	vol := e.waitClaimBound(t, ns, "many")
	mp := e.mounterPodOf(t, vol.Spec.CSI.VolumeHandle)
	pid := e.mounterPID(t, mp)

	// In steps of 20 directories (10,000 files), each within kubectl's command timeout.
	const step = 20
	start := time.Now()
	for d := 0; d < manyFilesDirs; d += step {
		e.sh(t, ns, "maker", fmt.Sprintf(
			`set -e; mkdir -p /data/m; d=%d; while [ $d -lt %d ]; do mkdir /data/m/d$d; j=0; while [ $j -lt %d ]; do : > /data/m/d$d/f$j; j=$((j+1)); done; d=$((d+1)); done`,
			d, d+step, manyFilesPerDir))
	}
	created := time.Since(start)
	e.requireNotKilled(t, mp.Metadata.Name, mp.Metadata.UID, "after creating the files")
	createPeak := procStatus(t, pid, "VmHWM")

	// The walk: every directory listed with every file stat'ed (ls -l: an empty regular file),
	// and every file opened and read (cat): a few processes a directory, not one a file, which
	// would cost more than the walk it measures.
	start = time.Now()
	total := 0
	for d := 0; d < manyFilesDirs; d += step {
		out := e.sh(t, ns, "maker", fmt.Sprintf(
			`set -e; d=%d; n=0; while [ $d -lt %d ]; do s=$(ls -l /data/m/d$d | grep -c '^-'); [ "$(cat /data/m/d$d/* | wc -c)" = 0 ]; n=$((n+s)); d=$((d+1)); done; echo $n`,
			d, d+step))
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("walk of directories %d-%d: %q", d, d+step-1, out)
		}
		total += n
	}
	walked := time.Since(start)
	if want := manyFilesDirs * manyFilesPerDir; total != want {
		t.Fatalf("the walk found %d files, want %d", total, want)
	}
	if got := strings.TrimSpace(e.sh(t, ns, "maker", "find /data -type f | wc -l")); got != strconv.Itoa(total) {
		t.Fatalf("find lists %s files, want %d", got, total)
	}
	e.requireNotKilled(t, mp.Metadata.Name, mp.Metadata.UID, "after the walk")
	if again := e.mounterPID(t, mp); again != pid {
		t.Fatalf("the mounter's process changed from %d to %d", pid, again)
	}
	t.Logf("%d files created in %s, walked (stat, read) in %s; mounter %s (limit %s): peak resident %d KiB while creating, %d KiB after the walk, its cgroup's peak %d KiB",
		total, created.Round(time.Second), walked.Round(time.Second), mp.Metadata.Name, mp.memoryLimit(), createPeak, procStatus(t, pid, "VmHWM"), memoryCgroupPeak(t, pid)>>10)

	// A snapshot of it, restored into a new claim: staging checks the volume (within the same
	// pod limit), then the pod lists what it holds.
	e.sh(t, ns, "maker", "sync")
	snap := object("snapshot.storage.k8s.io/v1", "VolumeSnapshot", ns, "snap")
	snap["spec"] = map[string]any{
		"volumeSnapshotClassName": snapshotClass,
		"source":                  map[string]any{"persistentVolumeClaimName": "many"},
	}
	e.applyObjects(t, snap)
	e.waitFor(t, ns, "snapshot snap ready", 10*time.Minute, func() (bool, error) {
		var vs volumeSnapshot
		if err := e.getJSON(&vs, "volumesnapshot", "-n", ns, "snap"); err != nil {
			return false, err
		}
		switch {
		case vs.Status == nil:
			return false, fmt.Errorf("snapshot snap has no status")
		case vs.Status.ReadyToUse != nil && *vs.Status.ReadyToUse:
			return true, nil
		case vs.Status.Error != nil:
			return false, fmt.Errorf("snapshot snap: %s", vs.Status.Error.Message)
		}
		return false, fmt.Errorf("snapshot snap is not ready")
	})
	e.applyObjects(t, claimFrom(ns, "restored", imageClass, manyFilesClaim, "VolumeSnapshot", "snap"))
	e.startPod(t, ns, podSpec{name: "reader", volumes: []podVolume{{claim: "restored", path: "/data"}}})
	restored := e.waitClaimBound(t, ns, "restored")
	if got := strings.TrimSpace(e.sh(t, ns, "reader", "find /data -type f | wc -l")); got != strconv.Itoa(total) {
		t.Errorf("the restored claim holds %s files, the source %d", got, total)
	}
	rp := e.mounterPodOf(t, restored.Spec.CSI.VolumeHandle)
	e.requireNotKilled(t, rp.Metadata.Name, rp.Metadata.UID, "after staging the restored claim")
	e.requireNotKilled(t, mp.Metadata.Name, mp.Metadata.UID, "at the end")
	e.deletePod(t, ns, "reader")
	e.deletePod(t, ns, "maker")
}
