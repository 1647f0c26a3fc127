package fatvol_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Growth in the crash harness: a volume nearly full grows (Volume.Grow) while files are open and
// written across the old end, by a partial cluster, by many clusters and across FAT sectors. A
// cut at any request must leave the old size or the new one; everything fsync'ed must be there,
// and a file fsync'ed after a growth lives in clusters only the new size has. The volume is
// filled by preallocation (fallocate keeping the size, on a file held open), not by data: at
// every cut the engine reads every file, and 33 MiB of data on the FAT32 volume would make each
// cut read them (a chain past its file's size is what a cut may leave anyway).

func init() { crashWorkloads = append(crashWorkloads, growWorkloads...) }

// growPrefix marks the workloads that need a volume with room to grow (crashImage).
const growPrefix = "grow"

var growWorkloads = []crashWorkload{
	{name: growPrefix, setup: func(r *crashRun) {
		r.create("pre", nil)
		r.create("data", r.data(600))
	}, run: func(r *crashRun) {
		pre := r.holdOpen("pre")
		st, err := r.v.StatFS()
		r.check("statfs", err)
		r.check("preallocate", pre.Fallocate(0, int64(st.FreeClusters-4)*int64(st.ClusterSize), true))
		held := r.holdOpen("data")
		r.appendTo("data", r.data(1500)) // the last free clusters of the old size
		r.grow(8<<10 + 300)              // and a partial sector past the new clusters
		r.appendTo("data", r.data(3000)) // across the old end
		r.fsync("data")
		r.create("new", r.data(2000))
		r.grow(96 << 10) // across FAT sectors on every type
		r.writeAt("new", 1000, r.data(20000))
		r.fsync("new")
		r.create(longName(1), r.data(700))
		r.syncfs()
		r.grow(1 << 10)
		r.appendTo(longName(1), r.data(3000))
		r.check("close data", held.Close())
		r.check("close pre", pre.Close()) // its preallocated clusters go
		r.unmount()
	}},
}

// grow grows the image under the volume by n bytes and the volume with it.
func (r *crashRun) grow(n int64) {
	f := r.rec.Device.(*blockdev.File)
	before := r.v.Geometry()
	r.check("grow the image", os.Truncate(f.Path(), f.Size()+n))
	_, err := f.UpdateSize()
	r.check("read the image's size", err)
	_, err = r.v.Grow()
	r.check("grow", err)
	if after := r.v.Geometry(); after.Clusters <= before.Clusters && n >= int64(before.ClusterSize) {
		r.t.Fatalf("grow by %d bytes: %d clusters, as before", n, after.Clusters)
	}
}

// crashImage is a workload's volume: mkfs.fat's for most, ours with FATs for 512 KiB more (same
// type, 512-byte clusters) for the growth workloads.
func crashImage(t *testing.T, spec volumeSpec, w crashWorkload) string {
	t.Helper()
	if !strings.HasPrefix(w.name, growPrefix) {
		return makeImage(t, spec)
	}
	var typ ondisk.FATType
	switch i := slices.Index(spec.args, "-F"); spec.args[i+1] {
	case "12":
		typ = ondisk.FAT12
	case "16":
		typ = ondisk.FAT16
	default:
		typ = ondisk.FAT32
	}
	img := filepath.Join(t.TempDir(), "vol.img")
	dev, err := blockdev.CreateImage(img, spec.size)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mkfs.Format(dev, mkfs.Options{FATType: typ, SectorsPerCluster: 1, MaxSize: spec.size + 512<<10})
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("format %s with room: %v", spec.name, err)
	}
	return img
}

// padTo grows base with zeros to the image's size now: the medium at every cut of a workload
// that grew the image has the grown size (the image's size is the driver's, set before the
// volume grows), with zeros where nothing was written.
func padTo(t *testing.T, base []byte, img string) []byte {
	t.Helper()
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > int64(len(base)) {
		base = append(base, make([]byte, st.Size()-int64(len(base)))...)
	}
	return base
}
