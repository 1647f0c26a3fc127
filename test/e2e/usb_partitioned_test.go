package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/internal/judge"
	"github.com/csi-fat/csi-fat/node/usbtest"
)

// The MBR-partitioned stick of TestUSBPartitionedKeepAndAdopt, as most sticks and SD cards ship:
// an MBR and one FAT partition from 1 MiB.
const (
	partStickBytes  = 64 << 20
	partStickStart  = 1 << 20
	partStickSerial = "E2E0002"
)

// TestUSBPartitionedKeepAndAdopt is TestUSBKeepAndAdopt with a stick as it comes: an MBR (written
// by sfdisk) with one FAT partition from 1 MiB (mkfs.fat at its offset) holding a file a camera
// wrote (mcopy). A claim of a class that picks the stick by the port it is plugged into (byPath,
// pool media) adopts it with that file; a pod adds files; released with reclaim: keep, the
// partition holds them all (mtools at its offset, fsck.fat and the project's checker on a
// read-only loop device over the partition), and the table is byte for byte as it was; a second
// claim adopts the same file system (same serial number) with every file.
func TestUSBPartitionedKeepAndAdopt(t *testing.T) {
	e := need(t)
	for _, tool := range []string{"sfdisk", "mkfs.fat", "mcopy", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	stick, err := e.usb.Attach(partStickBytes, stickVendor, "Card", partStickSerial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.usb.Detach(stick); err != nil {
			t.Errorf("detaching the partitioned stick: %v", err)
		}
	})
	stickFile, err := usbtest.BackingFile(stick)
	if err != nil {
		t.Fatal(err)
	}
	sfdisk := exec.Command("sfdisk", "--no-reread", "--no-tell-kernel", "-q", stick.Loop)
	sfdisk.Stdin = strings.NewReader(fmt.Sprintf("label: dos\nstart=%d, type=e\n", partStickStart/512))
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk %s: %v\n%s", stick.Loop, err, out)
	}
	partKiB := (partStickBytes - partStickStart) / 1024
	if out, err := exec.Command("mkfs.fat", fmt.Sprintf("--offset=%d", partStickStart/512), "-h", fmt.Sprint(partStickStart/512),
		"-n", "CAMERA", stick.Loop, fmt.Sprint(partKiB)).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat in the partition: %v\n%s", err, out)
	}
	// The camera writes through the loop device, as the driver reads it (they share its cache);
	// the judges after a release read the backing file, as TestUSBKeepAndAdopt's do.
	onDevice := fmt.Sprintf("%s@@%d", stick.Loop, partStickStart) // mtools' image at an offset
	part := fmt.Sprintf("%s@@%d", stickFile, partStickStart)
	files := map[string][]byte{"DCIM.TXT": []byte("written by the camera\n")}
	camera := filepath.Join(t.TempDir(), "DCIM.TXT")
	if err := os.WriteFile(camera, files["DCIM.TXT"], 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mcopy", "-i", onDevice, camera, "::/DCIM.TXT").CombinedOutput(); err != nil {
		t.Fatalf("mcopy into the partition: %v\n%s", err, out)
	}
	table := headOf(t, stick.Loop, partStickStart)
	before, err := minfoGeometry(onDevice)
	if err != nil {
		t.Fatal(err)
	}

	ns := e.namespace(t)
	adopt := e.storageClass(t, ns, "usb-port", map[string]string{"pool": "media", "reclaim": "keep", "adopt": "true", "byPath": stick.ByPath})

	// First claim: the stick is adopted with the camera's file, and written.
	e.applyObjects(t, claimObject(ns, "first", adopt, "32Mi"))
	e.startPod(t, ns, podSpec{name: "first", volumes: []podVolume{{claim: "first", path: "/stick"}}})
	first := e.waitClaimBound(t, ns, "first")
	if h := first.Spec.CSI.VolumeHandle; !strings.HasPrefix(h, "usb:"+e.node+":") {
		t.Fatalf("volume handle %q is not a removable-media volume of node %s (IDs keep the pool's name usb)", h, e.node)
	}
	requireMounted(t, stick.Loop)
	if got, want := e.sha256InPod(t, ns, "first", "/stick/DCIM.TXT"), sha256Hex(files["DCIM.TXT"]); got != want {
		t.Errorf("DCIM.TXT on the adopted stick: sha256 %s, want %s", got, want)
	}
	added := map[string][]byte{
		"clip.raw":                 testData(5, 3<<20+11),
		"Notes from the field.txt": []byte("kept in the partition\n"),
	}
	for name, data := range added {
		e.writeInPod(t, ns, "first", "/stick/"+name, data)
		files[name] = data
	}

	// Release: pod and claim go, the files stay in the partition.
	e.deletePod(t, ns, "first")
	e.waitUnstaged(t, ns, first.Spec.CSI.VolumeHandle, stick.Loop)
	e.kubectlT(t, "delete", "pvc", "-n", ns, "first", "--timeout=1m")
	e.waitFor(t, ns, "volume of the first claim deleted", podStartTimeout, func() (bool, error) {
		there, err := e.exists("pv", first.Metadata.Name)
		return !there, err
	})
	if !bytes.Equal(headOf(t, stickFile, partStickStart), table) {
		t.Error("the stick's table (its first MiB) changed")
	}
	checkPartition(t, stickFile, partStickStart, partStickBytes-partStickStart)
	e.checkStickFiles(t, part, files)

	// Second claim: the same file system, with every file.
	e.applyObjects(t, claimObject(ns, "second", adopt, "32Mi"))
	e.startPod(t, ns, podSpec{name: "second", volumes: []podVolume{{claim: "second", path: "/stick"}}})
	second := e.waitClaimBound(t, ns, "second")
	for name, data := range files {
		if got, want := e.sha256InPod(t, ns, "second", "/stick/"+name), sha256Hex(data); got != want {
			t.Errorf("%s on the stick adopted again: sha256 %s, want %s", name, got, want)
		}
	}
	e.deletePod(t, ns, "second")
	e.waitUnstaged(t, ns, second.Spec.CSI.VolumeHandle, stick.Loop)
	e.kubectlT(t, "delete", "pvc", "-n", ns, "second", "--timeout=1m")
	e.waitFor(t, ns, "volume of the second claim deleted", podStartTimeout, func() (bool, error) {
		there, err := e.exists("pv", second.Metadata.Name)
		return !there, err
	})
	after, err := minfoGeometry(part)
	if err != nil {
		t.Fatal(err)
	}
	if after.serial != before.serial {
		t.Errorf("the partition has serial number %s, the camera's had %s: it was formatted", after.serial, before.serial)
	}
	if !bytes.Equal(headOf(t, stickFile, partStickStart), table) {
		t.Error("the stick's table (its first MiB) changed")
	}
	checkPartition(t, stickFile, partStickStart, partStickBytes-partStickStart)
	e.checkStickFiles(t, part, files)
}

// headOf reads the first n bytes of a file.
func headOf(t *testing.T, path string, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return b
}

// checkPartition judges the FAT in a partition of an image (fsck.fat -n and the project's
// checker) through a read-only loop device over the partition's bytes.
func checkPartition(t *testing.T, img string, start, size int64) {
	t.Helper()
	out, err := exec.Command("losetup", "--find", "--show", "--read-only", "--offset", fmt.Sprint(start),
		"--sizelimit", fmt.Sprint(size), img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup over the partition of %s: %v\n%s", img, err, out)
	}
	loop := strings.TrimSpace(string(out))
	defer func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v\n%s", loop, err, out)
		}
	}()
	if err := judge.Check(loop); err != nil {
		t.Errorf("the partition: %v", err)
	}
}
