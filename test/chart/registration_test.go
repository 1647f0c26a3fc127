package chart

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestRegistrationSidecar(t *testing.T) {
	pod := render(t).nodePlugin(t) // sidecar is the default
	reg := pod.container(t, "node-driver-registrar")
	if !strings.HasPrefix(reg.Image, "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.") {
		t.Errorf("registrar image %q, want a v2 release", reg.Image)
	}
	if got := reg.flag(t, "csi-address"); got != "/csi/csi.sock" {
		t.Errorf("registrar --csi-address=%q", got)
	}
	if got := reg.flag(t, "kubelet-registration-path"); got != kubeletSocket {
		t.Errorf("registrar --kubelet-registration-path=%q, want %q", got, kubeletSocket)
	}
	if hp, _ := pod.hostPathOf(reg, "/registration"); hp != registrationDir {
		t.Errorf("registrar /registration is host %q, want %q", hp, registrationDir)
	}
	if hp, _ := pod.hostPathOf(reg, "/csi"); hp != pluginDir {
		t.Errorf("registrar /csi is host %q, want %q", hp, pluginDir)
	}
	driver := pod.container(t, "csi-fat")
	for _, flag := range []string{"kubelet-registration-dir", "kubelet-registration-path"} {
		if got := driver.flagValues(flag); len(got) != 0 {
			t.Errorf("driver has --%s=%v beside the registrar", flag, got)
		}
	}
}

func TestRegistrationBuiltin(t *testing.T) {
	r := render(t, "--set", "registration.mode=builtin")
	pod := r.nodePlugin(t)
	if _, ok := pod.lookup("node-driver-registrar"); ok {
		t.Fatalf("registrar container present in builtin mode: %v", pod.containerNames())
	}
	driver := pod.container(t, "csi-fat")
	if got := driver.flag(t, "kubelet-registration-dir"); got != registrationDir {
		t.Errorf("--kubelet-registration-dir=%q, want %q", got, registrationDir)
	}
	if got := driver.flag(t, "kubelet-registration-path"); got != kubeletSocket {
		t.Errorf("--kubelet-registration-path=%q, want %q", got, kubeletSocket)
	}
	// The registration directory must be visible in the driver container at the same path: it
	// is, through the kubelet directory's mount.
	visible := false
	for _, m := range driver.VolumeMounts {
		hp, _ := pod.hostPathOf(driver, m.MountPath)
		if hp == m.MountPath && (registrationDir == hp || strings.HasPrefix(registrationDir, hp+"/")) {
			visible = true
		}
	}
	if !visible {
		t.Errorf("%s is not mounted at the same path in the driver container", registrationDir)
	}
	for _, v := range pod.Volumes {
		if v.Name == "registration-dir" {
			t.Error("registration-dir volume left over in builtin mode")
		}
	}
}

// TestKubeletDirUsedEverywhere renders with another kubelet root: no path may still point into
// /var/lib/kubelet.
func TestKubeletDirUsedEverywhere(t *testing.T) {
	const dir = "/data/kubelet"
	for _, mode := range []string{"sidecar", "builtin"} {
		out, err := runHelm(t, templateArgs("--set", "kubeletDir="+dir, "--set", "registration.mode="+mode)...)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte(kubeletDir)) {
			t.Errorf("mode %s: output still names %s with kubeletDir=%s", mode, kubeletDir, dir)
		}
		r, err := parseManifests(out)
		if err != nil {
			t.Fatal(err)
		}
		pod := r.nodePlugin(t)
		driver := pod.container(t, "csi-fat")
		if hp, _ := pod.hostPathOf(driver, "/csi"); hp != dir+"/plugins/fat.csi-fat.io" {
			t.Errorf("mode %s: /csi is host %q", mode, hp)
		}
		if hp, m := pod.hostPathOf(driver, dir); hp != dir || m.MountPropagation != "Bidirectional" {
			t.Errorf("mode %s: kubelet dir mount %q %q", mode, hp, m.MountPropagation)
		}
		sock := dir + "/plugins/fat.csi-fat.io/csi.sock"
		if mode == "builtin" {
			if driver.flag(t, "kubelet-registration-dir") != dir+"/plugins_registry" || driver.flag(t, "kubelet-registration-path") != sock {
				t.Errorf("builtin registration flags %v", driver.Args)
			}
		} else {
			reg := pod.container(t, "node-driver-registrar")
			if reg.flag(t, "kubelet-registration-path") != sock {
				t.Errorf("registrar args %v", reg.Args)
			}
			if hp, _ := pod.hostPathOf(reg, "/registration"); hp != dir+"/plugins_registry" {
				t.Errorf("registrar /registration is host %q", hp)
			}
		}
	}
}

// TestLocalClusterValues renders the values the local test cluster installs with: its own driver
// image, nothing pulled, built-in registration, USB on a fake sysfs tree.
func TestLocalClusterValues(t *testing.T) {
	r := render(t,
		"--set", "image.tag=e2e", "--set", "image.pullPolicy=Never",
		"--set", "registration.mode=builtin",
		"--set", "usb.enabled=true",
		"--set", "usb.sysfsRoot=/var/lib/csi-fat-e2e/usb/sys",
		"--set", "usb.byIdDir=/var/lib/csi-fat-e2e/usb/by-id",
		"--set", "usb.deviceGlob=loop*",
	)
	pod := r.nodePlugin(t)
	if got, want := pod.containerNames(), []string{"csi-fat", "csi-provisioner", "csi-resizer", "csi-snapshotter"}; !slices.Equal(got, want) {
		t.Errorf("containers %v, want %v: the driver and its sidecars, no registrar", got, want)
	}
	for _, c := range pod.Containers {
		if c.ImagePullPolicy != "Never" {
			t.Errorf("%s imagePullPolicy %q, want Never", c.Name, c.ImagePullPolicy)
		}
	}
	if img := pod.container(t, "csi-fat").Image; img != "ghcr.io/csi-fat/csi-fat:e2e" {
		t.Errorf("driver image %q", img)
	}
	for name, want := range map[string]string{
		"csi-provisioner": "registry.k8s.io/sig-storage/csi-provisioner:v6.4.0",
		"csi-resizer":     "registry.k8s.io/sig-storage/csi-resizer:v2.3.0",
		"csi-snapshotter": "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0",
	} {
		if img := pod.container(t, name).Image; img != want {
			t.Errorf("%s image %q, want %q: image.tag must not reach the sidecars", name, img, want)
		}
	}
	if !r.named(t, "StorageClass", "csi-fat-usb", &storageClass{}) || !r.named(t, "StorageClass", "csi-fat", &storageClass{}) {
		t.Error("want both StorageClasses")
	}
}
