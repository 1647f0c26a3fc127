package chart

import (
	"slices"
	"strings"
	"testing"
)

// discoveryArgs are the container's --media-discovery* arguments, in order.
func discoveryArgs(c container) []string {
	var out []string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--media-discovery") {
			out = append(out, a)
		}
	}
	return out
}

// TestDiscoveryOff: by default, and with the pool off even when asked, no discovery flag and no
// class of discovered media.
func TestDiscoveryOff(t *testing.T) {
	for _, flags := range [][]string{
		{"--set", "usb.enabled=true"},
		{"--set", "usb.discovery.enabled=true"}, // the pool is off: nothing to discover
	} {
		r := render(t, flags...)
		if args := discoveryArgs(r.nodePlugin(t).container(t, "csi-fat")); len(args) > 0 {
			t.Errorf("values %v: discovery flags %v", flags, args)
		}
		if r.named(t, "StorageClass", "csi-fat-discovered", &storageClass{}) {
			t.Errorf("values %v: the discovered media's StorageClass is rendered", flags)
		}
	}
}

// TestDiscoveryOn: the values become the driver's flags, and the class claims name is one no
// provisioner serves, bound once a pod is scheduled.
func TestDiscoveryOn(t *testing.T) {
	r := render(t, "--set", "usb.enabled=true", "--set", "usb.discovery.enabled=true",
		"--set", "usb.discovery.interval=2s", "--set", "usb.discovery.reclaimPolicy=Retain",
		"--set-json", `usb.discovery.parameters={"mode":"sync","codepage":850}`,
		"--set-json", `usb.discovery.mountOptions=["uid=1000","umask=022"]`)
	driver := r.nodePlugin(t).container(t, "csi-fat")
	if !driver.hasArg("--media-discovery") || driver.hasArg("--media-discovery-blank") {
		t.Errorf("want --media-discovery and no --media-discovery-blank: %v", discoveryArgs(driver))
	}
	driver.checkFlags(t, map[string]string{
		"media-discovery-storage-class":  "csi-fat-discovered",
		"media-discovery-reclaim-policy": "Retain",
		"media-discovery-interval":       "2s",
	})
	for _, want := range []string{"--media-discovery-parameter=mode=sync", "--media-discovery-parameter=codepage=850",
		"--media-discovery-mount-option=uid=1000", "--media-discovery-mount-option=umask=022"} {
		if !driver.hasArg(want) {
			t.Errorf("no %s: %v", want, discoveryArgs(driver))
		}
	}
	var sc storageClass
	if !r.named(t, "StorageClass", "csi-fat-discovered", &sc) {
		t.Fatal("no StorageClass csi-fat-discovered")
	}
	if sc.Provisioner != "kubernetes.io/no-provisioner" || sc.VolumeBindingMode != "WaitForFirstConsumer" {
		t.Errorf("class %+v: want no provisioner, WaitForFirstConsumer", sc)
	}

	r = render(t, "--set", "usb.enabled=true", "--set", "usb.discovery.enabled=true", "--set", "usb.discovery.blank=true",
		"--set", "usb.discovery.storageClass.create=false", "--set", "usb.discovery.storageClass.name=cameras")
	driver = r.nodePlugin(t).container(t, "csi-fat")
	driver.checkFlags(t, map[string]string{"media-discovery-storage-class": "cameras", "media-discovery-reclaim-policy": "Delete", "media-discovery-interval": "5s"})
	if !driver.hasArg("--media-discovery-blank") {
		t.Errorf("no --media-discovery-blank: %v", discoveryArgs(driver))
	}
	if r.named(t, "StorageClass", "cameras", &storageClass{}) || r.named(t, "StorageClass", "csi-fat-discovered", &storageClass{}) {
		t.Error("a discovered media class rendered with storageClass.create=false")
	}
}

// TestDiscoveryRBAC: the driver container runs as the service account the provisioner's
// ClusterRole is bound to, which lets it list, create, patch and delete PersistentVolumes.
func TestDiscoveryRBAC(t *testing.T) {
	r := render(t, "--set", "usb.enabled=true", "--set", "usb.discovery.enabled=true")
	var role struct {
		Rules []policyRule `json:"rules"`
	}
	if !r.named(t, "ClusterRole", "csi-fat-provisioner", &role) {
		t.Fatal("no ClusterRole csi-fat-provisioner")
	}
	var verbs []string
	for _, rule := range role.Rules {
		if slices.Contains(rule.Resources, "persistentvolumes") {
			verbs = append(verbs, rule.Verbs...)
		}
	}
	for _, v := range []string{"list", "create", "patch", "delete"} {
		if !slices.Contains(verbs, v) {
			t.Errorf("persistentvolumes verbs %v: no %s", verbs, v)
		}
	}
}

// TestDiscoverySchema: the schema refuses what the driver would refuse at start.
func TestDiscoverySchema(t *testing.T) {
	for _, flags := range [][]string{
		{"--set", "usb.discovery.reclaimPolicy=Recycle"},
		{"--set", "usb.discovery.interval=often"},
		{"--set", "usb.discovery.parameters.adopt=true"},
		{"--set", "usb.discovery.parameters.layout=gpt"},
		{"--set", "usb.discovery.colour=red"},
	} {
		if _, err := runHelm(t, templateArgs(flags...)...); err == nil {
			t.Errorf("values %v: rendered", flags)
		}
	}
}
