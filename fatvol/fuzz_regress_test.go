package fatvol_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/internal/fuzzimage"
)

// Regression tests for what FuzzVolume found; the inputs stay in testdata/fuzz/FuzzVolume.

// fat16Seed returns the FAT16 seed image, whole.
func fat16Seed(t *testing.T) *hostileImage {
	for _, s := range fuzzimage.MkfsSeeds(t) {
		if s.Name == "fat16" {
			return newHostileImage(t, s)
		}
	}
	t.Fatal("no fat16 seed")
	return nil
}

// nextAllocation returns the first cluster the engine gives a new file on image b.
func nextAllocation(t *testing.T, b []byte) uint32 {
	v, err := fatvol.Open(fuzzimage.NewDevice(bytes.Clone(b)), fatvol.Options{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := writeNewFile(v, "probe"); err != nil {
		t.Fatal(err)
	}
	fi, err := v.Stat("probe")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*fatvol.Attr).FirstCluster
}

// FuzzVolume/08c6c973831673a5: an empty file whose entry points at a free cluster (fsck.fat:
// "Contains a free cluster"). A new file was given that cluster; removing the empty file then
// freed the new file's clusters, and the data written and closed was lost.
func TestDanglingEntryDoesNotFreeNewData(t *testing.T) {
	h := fat16Seed(t)
	free := nextAllocation(t, h.b)
	h.setCluster("README.TXT", free)
	binary.LittleEndian.PutUint32(h.entry("README.TXT")[28:], 0)
	dev := fuzzimage.NewDevice(h.b)
	v, err := fatvol.Open(dev, fatvol.Options{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeNewFile(v, "new"); err != nil {
		t.Fatal(err)
	}
	err = v.Remove("README.TXT")
	if !errors.Is(err, fatvol.ErrCorrupt) {
		t.Errorf("removing the dangling entry: %v, want ErrCorrupt", err)
	}
	if err := v.Remove("a long file name.text"); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a change after the damage was found: %v, want EROFS", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	requireNewFile(t, dev)
}

// FuzzVolume/a53814fd5efca84e: a file whose chain runs into a free cluster. Reading it fails; a
// new file written afterwards lost its data to the broken chain when the volume was changed.
func TestChainIntoFreeClusterRefusesChanges(t *testing.T) {
	h := fat16Seed(t)
	h.setCluster("README.TXT", nextAllocation(t, h.b))
	dev := fuzzimage.NewDevice(h.b)
	v, err := fatvol.Open(dev, fatvol.Options{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadFile(v, "README.TXT"); !errors.Is(err, fatvol.ErrCorrupt) {
		t.Errorf("reading a chain into a free cluster: %v, want ErrCorrupt", err)
	}
	if v.Damage() == nil {
		t.Error("no damage recorded")
	}
	if err := writeNewFile(v, "new"); !errors.Is(err, syscall.EROFS) {
		t.Errorf("creating a file on a damaged volume: %v, want EROFS", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing was changed: our fsck finds the same single problem as before.
	rep, err := fsck.Check(dev)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors()) == 0 {
		t.Error("fsck finds nothing wrong")
	}
}

// requireNewFile reopens dev and reads the file writeNewFile wrote.
func requireNewFile(t *testing.T, dev *fuzzimage.Device) {
	t.Helper()
	v, err := fatvol.Open(dev, fatvol.Options{Logger: quietLogger, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got, err := fs.ReadFile(v, "new")
	if err != nil || !bytes.Equal(got, newFileData) {
		t.Fatalf("new file after reopening: %d bytes, %v; want %d bytes", len(got), err, len(newFileData))
	}
}
