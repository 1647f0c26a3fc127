package chart

import (
	"bytes"
	"strings"
	"testing"
)

// notes renders the chart's NOTES.txt as an installation with flags would print it.
func notes(t *testing.T, flags ...string) string {
	t.Helper()
	args := append([]string{"install", releaseName, chartDir, "--namespace", namespace, "--dry-run=client"}, flags...)
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	_, n, ok := bytes.Cut(out, []byte("\nNOTES:\n"))
	if !ok {
		t.Fatalf("no NOTES in helm's output:\n%s", out)
	}
	return string(n)
}

// TestNotesShowResizeAndSnapshot: the NOTES show how to grow a claim while the resizer runs and
// how to snapshot and restore one while the snapshotter runs, naming the chart's classes, and
// leave out what is switched off.
func TestNotesShowResizeAndSnapshot(t *testing.T) {
	all := notes(t, "--set", "volumeSnapshotClass.create=true", "--set", "volumeSnapshotClass.name=fat-snaps")
	for _, want := range []string{
		`kubectl patch pvc fat-data -p '{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}'`,
		"kubectl exec fat-user -- df -h /data",
		"kind: VolumeSnapshot",
		"volumeSnapshotClassName: fat-snaps\n",
		"persistentVolumeClaimName: fat-data",
		"apiGroup: snapshot.storage.k8s.io",
		"name: fat-data-snap",
		"-c csi-resizer",
		"-c csi-snapshotter",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("NOTES lack %q:\n%s", want, all)
		}
	}
	// Without the chart's class, the NOTES say which class the snapshot needs.
	if n := notes(t); !strings.Contains(n, "volumeSnapshotClassName: csi-fat   # a VolumeSnapshotClass of driver fat.csi-fat.io") {
		t.Errorf("NOTES without the chart's class do not say what class to use:\n%s", n)
	}

	none := notes(t, "--set", "resizer.enabled=false", "--set", "snapshotter.enabled=false")
	for _, absent := range []string{"kubectl patch pvc", "VolumeSnapshot", "csi-resizer", "csi-snapshotter"} {
		if strings.Contains(none, absent) {
			t.Errorf("NOTES mention %q with the resizer and the snapshotter off:\n%s", absent, none)
		}
	}
	if n := notes(t, "--set", "storageClasses.image.allowVolumeExpansion=false"); strings.Contains(n, "kubectl patch pvc") {
		t.Errorf("NOTES show a resize on a class that does not allow it:\n%s", n)
	}
}

// TestNotesShowMediaStatus: with removable media the NOTES show how to ask a driver why each
// device is or is not usable, at its metrics port, or its health port without metrics.
func TestNotesShowMediaStatus(t *testing.T) {
	const cmd = "kubectl -n csi-fat exec ds/csi-fat-node -c csi-fat -- /csi-fat media --address 127.0.0.1:"
	if n := notes(t, "--set", "usb.enabled=true"); !strings.Contains(n, cmd+"9810\n") {
		t.Errorf("NOTES lack %q9810:\n%s", cmd, n)
	}
	if n := notes(t, "--set", "usb.enabled=true", "--set", "metrics.enabled=false"); !strings.Contains(n, cmd+"9808\n") {
		t.Errorf("NOTES without metrics lack %q9808:\n%s", cmd, n)
	}
	if n := notes(t); strings.Contains(n, "csi-fat media") {
		t.Errorf("NOTES show csi-fat media without removable media:\n%s", n)
	}
}
