package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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

// restartDriver does something that ends the driver's container and waits until a driver is
// ready and registered again: a new pod, or the same pod's container restarted.
func (e *environment) restartDriver(t *testing.T, what string, do func()) {
	t.Helper()
	old := e.driverPod(t)
	restarts := old.restarts("csi-fat")
	start := time.Now()
	do()
	e.waitFor(t, releaseNS, "the driver back after "+what, 4*time.Minute, func() (bool, error) {
		var pods list[pod]
		if err := e.getJSON(&pods, "pods", "-n", releaseNS, "-l", driverPods); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if (p.Metadata.UID != old.Metadata.UID || p.restarts("csi-fat") > restarts) && p.ready() {
				return true, nil
			}
		}
		return false, fmt.Errorf("no new driver ready yet (%d pods)", len(pods.Items))
	})
	e.waitFor(t, releaseNS, "the driver registered with the kubelet again", time.Minute, func() (bool, error) {
		_, ok, err := e.csiNodeDriver()
		return ok, err
	})
	t.Logf("the driver was back %v after %s", time.Since(start).Round(100*time.Millisecond), what)
}

// upgradeChart upgrades the tests' release with its values and set, and waits for the roll.
func (e *environment) upgradeChart(t *testing.T, set ...string) {
	t.Helper()
	args := []string{"upgrade", releaseName, filepath.Join(e.repo, "charts", "csi-fat"), "--namespace", releaseNS,
		"--reuse-values", "--wait", "--timeout", "5m"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	if out, err := e.helmErr(args...); err != nil {
		t.Fatalf("helm %s: %v\n%s\n%s", strings.Join(args, " "), err, out, e.driverState())
	}
	e.kubectlT(t, "rollout", "status", "daemonset", "-n", releaseNS, "--timeout=3m", "-l", "app.kubernetes.io/instance="+releaseName)
}

func (p *pod) restarts(container string) int {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == container {
			return c.RestartCount
		}
	}
	return 0
}
