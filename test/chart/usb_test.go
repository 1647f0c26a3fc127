package chart

import (
	"slices"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/node/media"
)

func TestUSBOff(t *testing.T) {
	r := render(t)
	pod := r.nodePlugin(t)
	driver := pod.container(t, "csi-fat")
	for _, a := range driver.Args {
		if strings.HasPrefix(a, "--usb") || strings.HasPrefix(a, "--media") {
			t.Errorf("removable-media flag %s with usb.enabled false", a)
		}
	}
	if r.named(t, "StorageClass", "csi-fat-usb", &storageClass{}) {
		t.Error("USB StorageClass rendered with usb.enabled false")
	}
	if got := len(pod.Volumes); got != 7 {
		t.Errorf("%d volumes, want the 7 of the default node plugin", got)
	}
	if pod.HostPID {
		t.Error("hostPID with usb.enabled false: only the pool's look at the host's mount table needs it")
	}
}

func TestUSBOnDefaultPaths(t *testing.T) {
	r := render(t, "--set", "usb.enabled=true")
	pod := r.nodePlugin(t)
	driver := pod.container(t, "csi-fat")
	if !driver.hasArg("--media-pool") {
		t.Errorf("no --media-pool: %v", driver.Args)
	}
	// The chart's defaults are the driver's, but for the mount table: the host's, not the
	// container's.
	def := media.DefaultConfig()
	driver.checkFlags(t, map[string]string{
		"media-sysfs-root":  def.SysfsRoot,
		"media-by-id-dir":   def.ByIDDir,
		"media-by-path-dir": def.ByPathDir,
		"media-dev-dir":     def.DevDir,
		"media-device-glob": def.DeviceGlob, // USB disks and SD cards
		"media-mount-info":  "/proc/1/mountinfo",
	})
	// The host's mount table is the host init's, seen through the host's PID namespace.
	if !pod.HostPID {
		t.Error("no hostPID: /proc/1/mountinfo would be the container's own mount table")
	}
	// /sys and /dev are mounted anyway: nothing more.
	if got := len(pod.Volumes); got != 7 {
		t.Errorf("%d volumes with USB on default paths, want 7", got)
	}
	var sc storageClass
	if !r.named(t, "StorageClass", "csi-fat-usb", &sc) {
		t.Fatal("no USB StorageClass with usb.enabled true")
	}
	if sc.Parameters["pool"] != "usb" {
		t.Errorf("USB class parameters %v, want pool=usb", sc.Parameters)
	}
}

// TestUSBFakeSysfs is the local cluster's setting: a fake sysfs tree and by-id directory outside
// /sys and /dev, mounted from the host at the same paths.
func TestUSBFakeSysfs(t *testing.T) {
	const (
		sysfs  = "/var/lib/csi-fat-e2e/usb/sys"
		byID   = "/var/lib/csi-fat-e2e/usb/by-id"
		byPath = "/var/lib/csi-fat-e2e/usb/by-path"
	)
	pod := render(t,
		"--set", "usb.enabled=true",
		"--set", "usb.sysfsRoot="+sysfs,
		"--set", "usb.byIdDir="+byID,
		"--set", "usb.byPathDir="+byPath,
		"--set", "usb.deviceGlob=loop*",
	).nodePlugin(t)
	driver := pod.container(t, "csi-fat")
	if got := driver.flag(t, "media-sysfs-root"); got != sysfs {
		t.Errorf("--media-sysfs-root=%q", got)
	}
	if got := driver.flag(t, "media-by-path-dir"); got != byPath {
		t.Errorf("--media-by-path-dir=%q", got)
	}
	if got := driver.flag(t, "media-device-glob"); got != "loop*" {
		t.Errorf("--media-device-glob=%q", got)
	}
	for _, p := range []string{sysfs, byID, byPath} {
		if hp, m := pod.hostPathOf(driver, p); hp != p || m.MountPropagation != "" {
			t.Errorf("%s mounted from host %q (propagation %q), want the same path", p, hp, m.MountPropagation)
		}
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil && (v.HostPath.Path == sysfs || v.HostPath.Path == byID || v.HostPath.Path == byPath) && v.HostPath.Type != "Directory" {
			t.Errorf("host path %s of type %q, want Directory (it must exist)", v.HostPath.Path, v.HostPath.Type)
		}
	}
	// /dev stays the device directory: no mount of its own.
	if got := len(pod.Volumes); got != 10 {
		t.Errorf("%d volumes, want 7 plus the sysfs tree, by-id and by-path directories", got)
	}

	// A device directory outside /dev is mounted too; the same path twice only once.
	pod = render(t,
		"--set", "usb.enabled=true",
		"--set", "usb.byIdDir=/srv/usb",
		"--set", "usb.devDir=/srv/usb",
	).nodePlugin(t)
	if hp, _ := pod.hostPathOf(pod.container(t, "csi-fat"), "/srv/usb"); hp != "/srv/usb" {
		t.Errorf("/srv/usb mounted from %q", hp)
	}
	if got := len(pod.Volumes); got != 8 {
		t.Errorf("%d volumes, want 7 plus /srv/usb once", got)
	}
}

func TestUSBAllowDenyLists(t *testing.T) {
	driver := render(t,
		"--set", "usb.enabled=true",
		"--set-json", `usb.allow.vendor=["SanDisk","Kingston*"]`,
		"--set-json", `usb.allow.byId=["usb-SanDisk_*"]`,
		"--set-json", `usb.deny.serial=["0000: bad #1"]`,
		"--set-json", `usb.deny.model=["*Reader*"]`,
		"--set-json", `usb.allow.byPath=["pci-0000:00:14.0-usb-0:2:*"]`,
		"--set-json", `usb.include={"byId":["ata-Card_Reader_*"],"byPath":["pci-0000:00:1f.2-ata-3"]}`,
	).nodePlugin(t).container(t, "csi-fat")
	for flag, want := range map[string][]string{
		"media-allow-vendor":    {"SanDisk", "Kingston*"},
		"media-allow-by-id":     {"usb-SanDisk_*"},
		"media-deny-serial":     {"0000: bad #1"}, // YAML-special characters reach the driver verbatim
		"media-deny-model":      {"*Reader*"},
		"media-allow-by-path":   {"pci-0000:00:14.0-usb-0:2:*"},
		"media-include-by-id":   {"ata-Card_Reader_*"},
		"media-include-by-path": {"pci-0000:00:1f.2-ata-3"},
		"media-allow-model":     nil,
		"media-deny-vendor":     nil,
		"media-allow-serial":    nil,
		"media-deny-by-id":      nil,
		"media-deny-by-path":    nil,
	} {
		if got := driver.flagValues(flag); !slices.Equal(got, want) {
			t.Errorf("--%s values %q, want %q", flag, got, want)
		}
	}
}

// TestUSBContainerMountTable: usb.hostMountTable=false leaves the driver its container's own
// mount table and the pod its own PID namespace.
func TestUSBContainerMountTable(t *testing.T) {
	pod := render(t, "--set", "usb.enabled=true", "--set", "usb.hostMountTable=false").nodePlugin(t)
	if pod.HostPID {
		t.Error("hostPID with usb.hostMountTable=false")
	}
	if got := pod.container(t, "csi-fat").flag(t, "media-mount-info"); got != "" {
		t.Errorf("--media-mount-info=%q with usb.hostMountTable=false", got)
	}
}
