package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/node/media"
)

// TestUSBHostMountSeen: the driver runs in a container, yet a stick the host mounts (ext4, by the
// host's kernel, outside any pod) is busy to it, through the chart's hostPID and
// /proc/1/mountinfo; `csi-fat media` in the driver's container says so, and once the host
// unmounts it the same stick is a free one holding ext4.
func TestUSBHostMountSeen(t *testing.T) {
	e := need(t)
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	stick, err := e.usb.Attach(48<<20, stickVendor, "Mounted", "E2E0003")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.usb.Detach(stick); err != nil {
			t.Errorf("detaching the mounted stick: %v", err)
		}
	})
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", stick.Loop).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v\n%s", stick.Loop, err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "ext4", stick.Loop, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount %s on the host: %v\n%s", stick.Loop, err, out)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			exec.Command("umount", dir).Run()
		}
	})

	driver := e.driverPod(t).Metadata.Name
	status := func() media.Status {
		t.Helper()
		out, err := e.kubectlErr("exec", "-n", releaseNS, driver, "-c", "csi-fat", "--", "/csi-fat", "media", "--json")
		if err != nil {
			t.Fatalf("csi-fat media in the driver's container: %v\n%s", err, out)
		}
		var seen []media.Status
		if err := json.Unmarshal(out, &seen); err != nil {
			t.Fatalf("csi-fat media --json: %v\n%s", err, out)
		}
		for _, m := range seen {
			if m.Kernel == stick.Kernel {
				return m
			}
		}
		t.Fatalf("csi-fat media does not list %s:\n%s", stick.Kernel, out)
		return media.Status{}
	}
	if m := status(); m.State != "busy" || m.Content != "mounted" || !strings.HasPrefix(m.Reason, "mounted by the host") {
		t.Errorf("a stick the host has mounted: %+v, want busy, mounted by the host", m)
	}
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v\n%s", dir, err, out)
	}
	mounted = false
	if m := status(); m.State != "foreign" || m.Content != "ext4" {
		t.Errorf("the stick once the host unmounted it: %+v, want foreign, ext4", m)
	}
}
