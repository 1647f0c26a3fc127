package e2e

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/internal/judge"
)

// TestImageVolume follows a volume of the image pool through its life with pods: provisioned
// only once a pod needs it, written by one pod, read back byte for byte by the next, and left
// on the node as a FAT image that fsck.fat and mtools accept with the same files in it.
func TestImageVolume(t *testing.T) {
	e := need(t)
	ns := e.namespace(t)

	e.applyObjects(t, claimObject(ns, "data", imageClass, "64Mi"))
	e.waitForFirstConsumer(t, ns, "data")

	// Files: short and long names, a nested directory, and a few MiB of noise.
	const longName = "A file name far longer than eight dot three allows, with spaces.txt"
	files := map[string][]byte{
		"hello.txt":             []byte("hello from csi-fat\n"),
		longName:                []byte("long names are kept as VFAT long-name entries\n"),
		"sub/dir/nested.txt":    []byte("nested\n"),
		"big.bin":               testData(1, 3<<20+1234),
		"Mixed Case Name.Data1": testData(2, 4097),
	}
	vol := []podVolume{{claim: "data", path: "/data"}}
	e.startPod(t, ns, podSpec{name: "writer", volumes: vol})
	v := e.waitClaimBound(t, ns, "data")
	if got := v.nodeAffinity(); got != topologyKey+" in ["+e.node+"]" {
		t.Errorf("volume %s node affinity %q, want %s in [%s]", v.Metadata.Name, got, topologyKey, e.node)
	}
	img, err := e.imageFile(v.Spec.CSI.VolumeHandle)
	if err != nil {
		t.Fatal(err)
	}
	requireMounted(t, img)
	e.sh(t, ns, "writer", "mkdir -p /data/sub/dir")
	for name, data := range files {
		e.writeInPod(t, ns, "writer", "/data/"+name, data)
	}
	e.deletePod(t, ns, "writer")

	e.startPod(t, ns, podSpec{name: "reader", volumes: vol})
	for name, data := range files {
		if got, want := e.sha256InPod(t, ns, "reader", "/data/"+name), sha256Hex(data); got != want {
			t.Errorf("%s: sha256 %s in the second pod, want %s", name, got, want)
		}
	}
	listing := strings.Split(strings.TrimSpace(e.sh(t, ns, "reader", "cd /data && find .")), "\n")
	sort.Strings(listing)
	wantListing := []string{".", "./sub", "./sub/dir"}
	for name := range files {
		wantListing = append(wantListing, "./"+name)
	}
	sort.Strings(wantListing)
	if !slices.Equal(listing, wantListing) {
		t.Errorf("the second pod sees %q, want %q", listing, wantListing)
	}
	e.deletePod(t, ns, "reader")

	// Judge the image on the node once the volume is unstaged: NodeUnstageVolume closes the
	// volume, which writes everything back and clears the dirty bit, so the file is then what
	// the volume really holds. A copy taken while staged would be judged with write-back data
	// possibly still in the driver and its dirty bit set, which proves nothing either way.
	e.waitUnstaged(t, ns, v.Spec.CSI.VolumeHandle, img)
	if err := judge.Check(img); err != nil {
		t.Errorf("image %s: %v", img, err)
	}
	names, err := mtoolsFiles(img)
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{"sub/", "sub/dir/"}
	for name := range files {
		wantNames = append(wantNames, name)
	}
	sort.Strings(wantNames)
	sort.Strings(names)
	if !slices.Equal(names, wantNames) {
		t.Errorf("mdir lists %q, want %q", names, wantNames)
	}
	for name, data := range files {
		got, err := mtoolsRead(img, name)
		if err != nil {
			t.Error(err)
			continue
		}
		if sha256Hex(got) != sha256Hex(data) {
			t.Errorf("mtype %s: %d bytes, sha256 %s, want %d bytes, %s", name, len(got), sha256Hex(got), len(data), sha256Hex(data))
		}
	}
}
