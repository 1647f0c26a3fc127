package chart

import (
	"testing"
)

// TestMounterPods: by default the driver serves volumes in mounter pods that run its own image
// from its own namespace, with the chart's figures for them, and finds their sockets under the
// kubelet directory it mounts.
func TestMounterPods(t *testing.T) {
	r := render(t, "--set", "image.tag=v9", "--set", "image.pullPolicy=Never", "--set", "kubeletDir=/data/kubelet",
		"--set-json", `imagePullSecrets=[{"name":"regcred"}]`, "--set", "mounter.memoryOverhead=200Mi")
	pod := r.nodePlugin(t)
	driver := pod.container(t, "csi-fat")
	driver.checkFlags(t, map[string]string{
		"mounter":                   "pod",
		"mounter-image":             driver.Image,
		"mounter-namespace":         namespace,
		"mounter-pull-policy":       "Never",
		"mounter-priority-class":    "system-node-critical",
		"mounter-cpu-request":       "10m",
		"mounter-memory-request":    "32Mi",
		"mounter-memory-overhead":   "200Mi",
		"mounter-start-timeout":     "2m",
		"mounter-upgrade":           "true",
		"kubelet-dir":               "/data/kubelet",
		"mounter-image-pull-secret": "regcred",
	})
	if driver.Image != "ghcr.io/csi-fat/csi-fat:v9" {
		t.Errorf("driver image %q", driver.Image)
	}
	if host, m := pod.hostPathOf(driver, "/data/kubelet"); host != "/data/kubelet" || m.MountPropagation != "Bidirectional" {
		t.Errorf("the kubelet directory is mounted from %q with propagation %q: the driver would not reach mounter sockets or share mounts", host, m.MountPropagation)
	}
}

// TestMounterUpgradeOff: mounter.upgrade=false leaves mounters of another version serving.
func TestMounterUpgradeOff(t *testing.T) {
	driver := render(t, "--set", "mounter.upgrade=false").nodePlugin(t).container(t, "csi-fat")
	if got := driver.flag(t, "mounter-upgrade"); got != "false" {
		t.Errorf("--mounter-upgrade=%q with mounter.upgrade=false", got)
	}
}

// TestMounterInProcess: mounter.mode=inprocess gives the driver none of the pods' flags.
func TestMounterInProcess(t *testing.T) {
	driver := render(t, "--set", "mounter.mode=inprocess").nodePlugin(t).container(t, "csi-fat")
	if got := driver.flag(t, "mounter"); got != "inprocess" {
		t.Errorf("--mounter=%q", got)
	}
	if got := driver.flag(t, "mounter-image"); got != "" {
		t.Errorf("--mounter-image=%q with mounter.mode=inprocess", got)
	}
}

// TestMounterModeChecked: the schema refuses a mode the driver does not have.
func TestMounterModeChecked(t *testing.T) {
	templateFails(t, "--set", "mounter.mode=process")
}
