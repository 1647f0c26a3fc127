package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestDriverRestart deletes the driver's pod while a volume is staged and in use, and checks
// that the pod using it still reads it, that the new driver pod serves it (a new pod on the
// same claim reads what was written before and writes) and provisions and serves new volumes.
func TestDriverRestart(t *testing.T) {
	e := need(t)
	ns := e.namespace(t)
	data := testData(5, 1<<20+3)
	e.applyObjects(t, claimObject(ns, "before", imageClass, "16Mi"))
	e.startPod(t, ns, podSpec{name: "old", volumes: []podVolume{{claim: "before", path: "/data"}}})
	e.waitClaimBound(t, ns, "before")
	e.writeInPod(t, ns, "old", "/data/before.bin", data)

	oldDriver := e.driverPod(t)
	e.kubectlT(t, "delete", "pod", "-n", releaseNS, oldDriver.Metadata.Name, "--timeout=2m")
	var newDriver pod
	e.waitFor(t, ns, "a new driver pod ready", 3*time.Minute, func() (bool, error) {
		var pods list[pod]
		if err := e.getJSON(&pods, "pods", "-n", releaseNS, "-l", driverPods); err != nil {
			return false, err
		}
		if len(pods.Items) != 1 {
			return false, fmt.Errorf("%d driver pods", len(pods.Items))
		}
		newDriver = pods.Items[0]
		if newDriver.Metadata.UID == oldDriver.Metadata.UID {
			return false, fmt.Errorf("driver pod %s not replaced yet", newDriver.Metadata.Name)
		}
		return newDriver.ready(), fmt.Errorf("driver pod %s is %s, not ready", newDriver.Metadata.Name, newDriver.Status.Phase)
	})
	e.waitFor(t, ns, "the driver registered with the kubelet again", time.Minute, func() (bool, error) {
		_, ok, err := e.csiNodeDriver()
		return ok, err
	})

	// The pod started before the restart keeps its mount: its mounter pod serves on.
	if got, want := e.sha256InPod(t, ns, "old", "/data/before.bin"), sha256Hex(data); got != want {
		t.Errorf("after the restart the pod started before it reads sha256 %s, want %s", got, want)
	}

	e.startPod(t, ns, podSpec{name: "again", volumes: []podVolume{{claim: "before", path: "/data"}}})
	if got, want := e.sha256InPod(t, ns, "again", "/data/before.bin"), sha256Hex(data); got != want {
		t.Errorf("after the restart a new pod reads sha256 %s, want %s", got, want)
	}
	if got := e.sh(t, ns, "again", "echo after > /data/after.txt && sync /data/after.txt && cat /data/after.txt"); got != "after\n" {
		t.Errorf("after the restart a new pod reads back %q", got)
	}

	e.applyObjects(t, claimObject(ns, "new", imageClass, "16Mi"))
	e.startPod(t, ns, podSpec{name: "fresh", volumes: []podVolume{{claim: "new", path: "/data"}}})
	e.waitClaimBound(t, ns, "new")
	fresh := testData(6, 300<<10)
	e.writeInPod(t, ns, "fresh", "/data/fresh.bin", fresh)
	if got, want := e.sha256InPod(t, ns, "fresh", "/data/fresh.bin"), sha256Hex(fresh); got != want {
		t.Errorf("a new volume after the restart reads sha256 %s, want %s", got, want)
	}
	// The namespace's deletion at the end unpublishes and unstages all three pods' volumes,
	// the old pod's included: it fails the test if the restarted driver cannot.
}

// driverPod returns the driver's (only) pod.
func (e *environment) driverPod(t *testing.T) pod {
	t.Helper()
	var pods list[pod]
	e.getJSONT(t, &pods, "pods", "-n", releaseNS, "-l", driverPods)
	if len(pods.Items) != 1 {
		t.Fatalf("%d driver pods, want 1", len(pods.Items))
	}
	return pods.Items[0]
}
