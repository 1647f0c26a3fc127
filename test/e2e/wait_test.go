package e2e

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

const pollInterval = 500 * time.Millisecond

// errGiveUp, wrapped by a condition's error, ends a poll at once: waiting longer cannot help.
var errGiveUp = errors.New("giving up")

// poll calls cond until it reports true or timeout passes; the error then carries what cond
// last reported.
func poll(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if errors.Is(err, errGiveUp) {
			return err
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("not within %s: %w", timeout, err)
			}
			return fmt.Errorf("not within %s", timeout)
		}
		time.Sleep(pollInterval)
	}
}

// waitFor is poll for a test: when the wait fails it dumps the state of ns and the driver and
// fails the test.
func (e *environment) waitFor(t testing.TB, ns, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	start := time.Now()
	if err := poll(timeout, cond); err != nil {
		e.dump(t, ns)
		t.Fatalf("waiting for %s: %v", what, err)
	}
	t.Logf("%s after %s", what, time.Since(start).Round(100*time.Millisecond))
}

// dumped remembers the tests whose state was dumped already, so a failure is dumped once.
var dumped sync.Map

// dump logs what helps to understand a failure: the objects and events of ns, the driver's
// pods, events and logs, and the host's FUSE mounts.
func (e *environment) dump(t testing.TB, ns string) {
	t.Helper()
	if _, done := dumped.LoadOrStore(t.Name(), true); done {
		return
	}
	var b strings.Builder
	section := func(title string, args ...string) {
		out, err := e.kubectlErr(args...)
		fmt.Fprintf(&b, "\n----- %s (kubectl %s)\n%s", title, strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	if ns != "" {
		section("objects", "get", "pods,pvc", "-n", ns, "-o", "wide")
		section("pods", "describe", "pods", "-n", ns)
		section("claims", "describe", "pvc", "-n", ns)
		section("events", "get", "events", "-n", ns, "--sort-by=.lastTimestamp")
		if e.claims.snapshots {
			section("snapshots", "describe", "volumesnapshots", "-n", ns)
		}
	}
	if e.claims.snapshots {
		section("snapshot contents", "get", "volumesnapshotcontents", "-o", "wide")
	}
	section("volumes and classes", "get", "pv,storageclass,csistoragecapacities", "-A", "-o", "wide")
	host := fuseMounts()
	if e.claims.snapshots {
		host += snapshotControllerLog()
	}
	t.Log(b.String() + e.driverState() + host)
}

// snapshotControllerLog is the end of the log of the local cluster's snapshot controller, which
// runs on the host (test/e2e/cluster/up.sh).
func snapshotControllerLog() string {
	const path = "/var/lib/csi-fat-e2e/logs/snapshot-controller.log"
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("\n----- snapshot controller log: %v\n", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return fmt.Sprintf("\n----- snapshot controller log (%s, last 40 lines)\n%s\n", path, strings.Join(lines[max(0, len(lines)-40):], "\n"))
}

// driverState describes the driver's pods, their events and logs.
func (e *environment) driverState() string {
	var b strings.Builder
	section := func(title string, args ...string) {
		out, err := e.kubectlErr(args...)
		fmt.Fprintf(&b, "\n----- %s (kubectl %s)\n%s", title, strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	section("driver pods", "describe", "pods", "-n", releaseNS, "-l", driverPods)
	section("driver events", "get", "events", "-n", releaseNS, "--sort-by=.lastTimestamp")
	section("driver log", "logs", "-n", releaseNS, "-l", driverPods, "-c", "csi-fat", "--tail=150", "--prefix")
	section("provisioner log", "logs", "-n", releaseNS, "-l", driverPods, "-c", "csi-provisioner", "--tail=60", "--prefix")
	section("mounter pods", "get", "pods", "-n", releaseNS, "-l", mounterPods, "-o", "wide")
	section("mounter logs", "logs", "-n", releaseNS, "-l", mounterPods, "--tail=20", "--prefix")
	if e.claims.onlineExpansion {
		section("resizer log", "logs", "-n", releaseNS, "-l", driverPods, "-c", "csi-resizer", "--tail=60", "--prefix")
	}
	if e.claims.snapshots {
		section("snapshotter log", "logs", "-n", releaseNS, "-l", driverPods, "-c", "csi-snapshotter", "--tail=60", "--prefix")
	}
	return b.String()
}

// fuseMounts lists the host's FUSE mounts, the driver's volumes among them.
func fuseMounts() string {
	mounts, err := hostMounts()
	if err != nil {
		return fmt.Sprintf("\n----- host FUSE mounts: %v\n", err)
	}
	var b strings.Builder
	b.WriteString("\n----- host FUSE mounts\n")
	for _, m := range mounts {
		if strings.HasPrefix(m.FSType, "fuse") {
			fmt.Fprintf(&b, "%s on %s (%s)\n", m.Source, m.MountPoint, m.FSType)
		}
	}
	return b.String()
}
