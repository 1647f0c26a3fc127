package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/internal/judge"
	"github.com/csi-fat/csi-fat/node/usbtest"
)

// The chart's class of discovered media, and the serials of this test's sticks: discovery is
// turned on for them only (parameters.serial), so the tests' shared stick is never published.
const (
	discoveredClass   = "csi-fat-discovered"
	discoverySerials  = "DISC*"
	discoveryInterval = "1s"
)

// discoveredOf lists the discovered PVs of the stick with this serial (none, one, or, for a
// moment, a released one and its successor).
func (e *environment) discoveredOf(serial string) ([]pv, error) {
	var l list[pv]
	err := e.getJSON(&l, "pv", "-l", "app.kubernetes.io/managed-by=csi-fat-discovery,"+driverName+"/serial="+serial)
	return l.Items, err
}

// waitDiscovered waits for the one PV of the stick with this serial that cond accepts.
func (e *environment) waitDiscovered(t *testing.T, ns, serial, what string, cond func(*pv) error) pv {
	t.Helper()
	var found pv
	e.waitFor(t, ns, what, 2*time.Minute, func() (bool, error) {
		pvs, err := e.discoveredOf(serial)
		if err != nil {
			return false, err
		}
		if len(pvs) != 1 {
			return false, fmt.Errorf("%d discovered PVs of %s", len(pvs), serial)
		}
		if err := cond(&pvs[0]); err != nil {
			return false, err
		}
		found = pvs[0]
		return true, nil
	})
	return found
}

// discoveredClaim is a claim of the discovered media's class that picks one by its labels.
func discoveredClaim(ns, name string, selector map[string]string) map[string]any {
	c := claimObject(ns, name, discoveredClass, "1Mi")
	c["spec"].(map[string]any)["selector"] = map[string]any{"matchLabels": selector}
	return c
}

// TestUSBDiscovery: with discovery mode on, a FAT stick plugged in (a camera's card with a photo
// on it) is published as a PV of its own with the labels of its node, serial, vendor, model, file
// system label and size; a claim picks it by its file system label, and its pod reads the photo and
// writes a file. The claim deleted, the provisioner deletes the PV and the stick comes back as a
// fresh Available PV holding both files. Pulled out unbound, its PV goes, and comes back when it
// is plugged in again; pulled out while a claim is bound, its PV stays, marked present=false, and
// the mark goes when the stick is back, whose volume then serves a pod again.
func TestUSBDiscovery(t *testing.T) {
	e := need(t)
	for _, tool := range []string{"mkfs.fat", "mcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	cam, err := e.usb.Attach(48<<20, stickVendor, "Camera", "DISC0001")
	if err != nil {
		t.Fatal(err)
	}
	camFile, err := usbtest.BackingFile(cam)
	if err != nil {
		t.Fatal(err)
	}
	photo := testData(7, 300<<10+5)
	photoPath := filepath.Join(t.TempDir(), "photo.jpg")
	if err := os.WriteFile(photoPath, photo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"mkfs.fat", "-n", "CAM01", cam.Loop}, {"mcopy", "-i", cam.Loop, photoPath, "::/DSC0001.JPG"}} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
	}
	// Turned off last, once the sticks are gone and their PVs with them.
	t.Cleanup(func() {
		e.upgradeChart(t, "usb.discovery.enabled=false")
	})
	t.Cleanup(func() {
		if err := e.usb.Detach(cam); err != nil {
			t.Errorf("detaching the camera stick: %v", err)
		}
		if err := poll(2*time.Minute, func() (bool, error) {
			pvs, err := e.discoveredOf("DISC0001")
			return len(pvs) == 0, err
		}); err != nil {
			t.Errorf("the camera stick's PVs after it was detached: %v", err)
		}
	})
	ns := e.namespace(t)

	e.upgradeChart(t, "usb.discovery.enabled=true", "usb.discovery.interval="+discoveryInterval,
		"usb.discovery.parameters.serial="+discoverySerials)

	// Published, with its labels.
	first := e.waitDiscovered(t, ns, "DISC0001", "the camera stick published", func(v *pv) error {
		if v.Status.Phase != "Available" {
			return fmt.Errorf("PV %s is %s", v.Metadata.Name, v.Status.Phase)
		}
		return nil
	})
	wantLabels := map[string]string{
		driverName + "/node":     e.node,
		driverName + "/serial":   "DISC0001",
		driverName + "/vendor":   stickVendor,
		driverName + "/model":    "Camera",
		driverName + "/fs-label": "CAM01",
		driverName + "/size":     strconv.FormatInt(cam.Size, 10),
		driverName + "/present":  "true",
	}
	for k, v := range wantLabels {
		if got := first.Metadata.Labels[k]; got != v {
			t.Errorf("PV %s: label %s=%q, want %q", first.Metadata.Name, k, got, v)
		}
	}
	if s := first.Spec; s.StorageClassName != discoveredClass || s.ReclaimPolicy != "Delete" || s.CSI == nil ||
		s.CSI.Driver != driverName || !strings.HasPrefix(s.CSI.VolumeHandle, "usb:"+e.node+":") {
		t.Errorf("PV %s: spec %+v", first.Metadata.Name, s)
	}
	if q, err := parseQuantity(first.Spec.Capacity["storage"]); err != nil || q != cam.Size {
		t.Errorf("PV %s: capacity %q, want %d bytes", first.Metadata.Name, first.Spec.Capacity["storage"], cam.Size)
	}
	if pvs, err := e.discoveredOf(stickSerial); err != nil || len(pvs) != 0 {
		t.Errorf("the shared stick, which the serial pattern leaves out: %d discovered PVs, %v", len(pvs), err)
	}

	// A claim picks it by its file system label; the pod reads the photo and writes a file.
	e.applyObjects(t, discoveredClaim(ns, "camera", map[string]string{driverName + "/fs-label": "CAM01"}))
	e.startPod(t, ns, podSpec{name: "camera", volumes: []podVolume{{claim: "camera", path: "/card"}}})
	bound := e.waitClaimBound(t, ns, "camera")
	if bound.Metadata.Name != first.Metadata.Name {
		t.Fatalf("the claim is bound to %s, not to the camera stick's %s", bound.Metadata.Name, first.Metadata.Name)
	}
	if got, want := e.sha256InPod(t, ns, "camera", "/card/DSC0001.JPG"), sha256Hex(photo); got != want {
		t.Errorf("the photo in the pod: sha256 %s, want %s", got, want)
	}
	e.sh(t, ns, "camera", "echo processed > /card/processed.txt && sync /card/processed.txt")

	// Released: the provisioner deletes the PV (the volume, kept on the stick), and the stick is
	// published again as a fresh PV.
	e.deletePod(t, ns, "camera")
	e.waitUnstaged(t, ns, first.Spec.CSI.VolumeHandle, cam.Loop)
	e.kubectlT(t, "delete", "pvc", "-n", ns, "camera", "--timeout=1m")
	again := e.waitDiscovered(t, ns, "DISC0001", "the released camera stick published again", func(v *pv) error {
		if v.Metadata.UID == first.Metadata.UID || v.Status.Phase != "Available" {
			return fmt.Errorf("PV %s (uid %s) is %s", v.Metadata.Name, v.Metadata.UID, v.Status.Phase)
		}
		return nil
	})
	if err := judge.Check(camFile); err != nil {
		t.Errorf("the released camera stick: %v", err)
	}
	files := map[string][]byte{"DSC0001.JPG": photo, "processed.txt": []byte("processed\n")}
	e.checkStickFiles(t, camFile, files)

	// Pulled out while no claim is bound: its PV goes; plugged in again, it is back.
	e.usb.Unplug(t, cam)
	e.waitFor(t, ns, "the pulled camera stick's PV deleted", 2*time.Minute, func() (bool, error) {
		pvs, err := e.discoveredOf("DISC0001")
		return len(pvs) == 0, err
	})
	e.usb.Replug(t, cam)
	replugged := e.waitDiscovered(t, ns, "DISC0001", "the camera stick published once plugged in again", func(v *pv) error {
		if v.Metadata.UID == again.Metadata.UID || v.Status.Phase != "Available" {
			return fmt.Errorf("PV %s (uid %s) is %s", v.Metadata.Name, v.Metadata.UID, v.Status.Phase)
		}
		return nil
	})

	// Pulled out while a claim is bound: marked, not deleted; back, the mark goes, and the
	// claim's volume serves a pod again.
	e.applyObjects(t, discoveredClaim(ns, "kept", map[string]string{driverName + "/serial": "DISC0001"}))
	e.startPod(t, ns, podSpec{name: "kept", volumes: []podVolume{{claim: "kept", path: "/card"}}})
	if v := e.waitClaimBound(t, ns, "kept"); v.Metadata.Name != replugged.Metadata.Name {
		t.Fatalf("claim kept is bound to %s, not to %s", v.Metadata.Name, replugged.Metadata.Name)
	}
	e.deletePod(t, ns, "kept")
	e.waitUnstaged(t, ns, replugged.Spec.CSI.VolumeHandle, cam.Loop)
	e.usb.Unplug(t, cam)
	marked := e.waitDiscovered(t, ns, "DISC0001", "the bound PV of the pulled stick marked", func(v *pv) error {
		if v.Metadata.Labels[driverName+"/present"] != "false" || v.Metadata.Annotations[driverName+"/gone-since"] == "" {
			return fmt.Errorf("PV %s: labels %v, annotations %v", v.Metadata.Name, v.Metadata.Labels, v.Metadata.Annotations)
		}
		return nil
	})
	if marked.Metadata.UID != replugged.Metadata.UID || marked.Status.Phase != "Bound" {
		t.Errorf("the marked PV %s (uid %s) is %s; want the bound %s", marked.Metadata.Name, marked.Metadata.UID, marked.Status.Phase, replugged.Metadata.UID)
	}
	if _, err := time.Parse(time.RFC3339, marked.Metadata.Annotations[driverName+"/gone-since"]); err != nil {
		t.Errorf("gone-since: %v", err)
	}
	e.usb.Replug(t, cam)
	e.waitDiscovered(t, ns, "DISC0001", "the mark cleared once the stick is back", func(v *pv) error {
		if v.Metadata.Labels[driverName+"/present"] != "true" || v.Metadata.Annotations[driverName+"/gone-since"] != "" {
			return fmt.Errorf("PV %s: labels %v, annotations %v", v.Metadata.Name, v.Metadata.Labels, v.Metadata.Annotations)
		}
		if v.Metadata.UID != replugged.Metadata.UID {
			return fmt.Errorf("PV %s has uid %s, not the bound one's %s", v.Metadata.Name, v.Metadata.UID, replugged.Metadata.UID)
		}
		return nil
	})
	e.startPod(t, ns, podSpec{name: "kept-again", volumes: []podVolume{{claim: "kept", path: "/card"}}})
	if got := strings.TrimSpace(e.sh(t, ns, "kept-again", "cat /card/processed.txt")); got != "processed" {
		t.Errorf("processed.txt after the re-plug reads %q", got)
	}
	e.deletePod(t, ns, "kept-again")
	e.waitUnstaged(t, ns, replugged.Spec.CSI.VolumeHandle, cam.Loop)
}
