package e2e

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/internal/judge"
	"github.com/csi-fat/csi-fat/node/usbtest"
)

// TestUSBKeepAndAdopt claims the fake stick (a loop device behind a fake sysfs tree), writes to
// it, releases it with reclaim: keep, and claims it again with adopt: the new volume is the same
// file system (same serial number) with the same files.
func TestUSBKeepAndAdopt(t *testing.T) {
	e := need(t)
	ns := e.namespace(t)
	fresh := e.storageClass(t, ns, "usb-fresh", map[string]string{"pool": "usb", "reclaim": "keep"})
	adopt := e.storageClass(t, ns, "usb-adopt", map[string]string{"pool": "usb", "reclaim": "keep", "adopt": "true"})
	files := map[string][]byte{
		"photo.jpg":                   testData(4, 2<<20+77),
		"Notes for the next user.txt": []byte("kept across claims\n"),
	}
	stickFile, err := usbtest.BackingFile(e.stick)
	if err != nil {
		t.Fatal(err)
	}

	// Claim: the stick is formatted and written.
	e.applyObjects(t, claimObject(ns, "first", fresh, "32Mi"))
	e.startPod(t, ns, podSpec{name: "first", volumes: []podVolume{{claim: "first", path: "/stick"}}})
	first := e.waitClaimBound(t, ns, "first")
	if h := first.Spec.CSI.VolumeHandle; !strings.HasPrefix(h, "usb:"+e.node+":") {
		t.Fatalf("volume handle %q is not a USB volume of node %s", h, e.node)
	}
	requireMounted(t, e.stick.Loop)
	for name, data := range files {
		e.writeInPod(t, ns, "first", "/stick/"+name, data)
	}

	// Release: pod and claim go, the files stay on the stick.
	e.deletePod(t, ns, "first")
	e.waitUnstaged(t, ns, first.Spec.CSI.VolumeHandle, e.stick.Loop)
	e.kubectlT(t, "delete", "pvc", "-n", ns, "first", "--timeout=1m")
	e.waitFor(t, ns, "volume of the first claim deleted", podStartTimeout, func() (bool, error) {
		there, err := e.exists("pv", first.Metadata.Name)
		return !there, err
	})
	if err := judge.Check(stickFile); err != nil {
		t.Errorf("the released stick: %v", err)
	}
	before, err := minfoGeometry(stickFile)
	if err != nil {
		t.Fatal(err)
	}
	e.checkStickFiles(t, stickFile, files)

	// Adopt: a new claim gets the same file system with its files.
	e.applyObjects(t, claimObject(ns, "second", adopt, "32Mi"))
	e.startPod(t, ns, podSpec{name: "second", volumes: []podVolume{{claim: "second", path: "/stick"}}})
	second := e.waitClaimBound(t, ns, "second")
	for name, data := range files {
		if got, want := e.sha256InPod(t, ns, "second", "/stick/"+name), sha256Hex(data); got != want {
			t.Errorf("%s on the adopted stick: sha256 %s, want %s", name, got, want)
		}
	}
	e.sh(t, ns, "second", "echo adopted > /stick/second.txt && sync /stick/second.txt")
	e.deletePod(t, ns, "second")
	e.waitUnstaged(t, ns, second.Spec.CSI.VolumeHandle, e.stick.Loop)
	after, err := minfoGeometry(stickFile)
	if err != nil {
		t.Fatal(err)
	}
	if after.serial != before.serial {
		t.Errorf("the adopted stick has serial number %s, the released one had %s: it was formatted again", after.serial, before.serial)
	}
	if err := judge.Check(stickFile); err != nil {
		t.Errorf("the stick after adoption: %v", err)
	}
	files["second.txt"] = []byte("adopted\n")
	e.checkStickFiles(t, stickFile, files)
}

// checkStickFiles checks with mtools that a stick holds exactly files.
func (e *environment) checkStickFiles(t *testing.T, img string, files map[string][]byte) {
	t.Helper()
	names, err := mtoolsFiles(img)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for name, data := range files {
		want = append(want, name)
		got, err := mtoolsRead(img, name)
		if err != nil {
			t.Error(err)
		} else if sha256Hex(got) != sha256Hex(data) {
			t.Errorf("mtype %s: %d bytes, want %d with sha256 %s", name, len(got), len(data), sha256Hex(data))
		}
	}
	sort.Strings(want)
	sort.Strings(names)
	if !slices.Equal(names, want) {
		t.Errorf("mdir lists %q on the stick, want %q", names, want)
	}
}
