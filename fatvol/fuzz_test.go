package fatvol_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/internal/fuzzimage"
)

var dosfstoolsDir = filepath.Join("..", "..", "shared", "dosfstools-tests")

// addImageSeeds seeds f with small mkfs.fat images and the small dosfstools test images.
func addImageSeeds(f *testing.F) {
	for _, s := range fuzzimage.MkfsSeeds(f) {
		f.Add(s.Image)
	}
	images, _ := fuzzimage.DosfstoolsSeeds(f, dosfstoolsDir)
	for _, s := range images {
		f.Add(s.Image)
	}
}

// FuzzVolume opens any image read-write (on an in-memory copy), walks it with fs.WalkDir, reads
// every file, creates, writes and removes a little, closes it, and runs fsck on the result. None
// of it may panic or hang; the work and memory must stay bounded by the device: every directory
// is listed at most once however its entries point, no file yields more bytes than the data area
// holds, and allocations stay within a multiple of the device size. What the engine wrote and
// reported written must read back after reopening.
func FuzzVolume(f *testing.F) {
	addImageSeeds(f)
	f.Fuzz(func(t *testing.T, image []byte) {
		defer fuzzimage.Watchdog("FuzzVolume")()
		allocs := fuzzimage.StartAllocs()
		dev := fuzzimage.NewDevice(image)
		exerciseVolume(t, dev)
		if rep, err := fsck.Check(dev); err == nil && rep == nil {
			t.Fatal("fsck: no report and no error")
		}
		allocs.Check(t, 64*dev.Size()+64<<20)
	})
}

// newFileData is what exerciseVolume writes to a new file: more than a cluster of the seeds.
var newFileData = bytes.Repeat([]byte("fuzz data\n"), 300)

func exerciseVolume(t *testing.T, dev *fuzzimage.Device) {
	v, err := fatvol.Open(dev, fatvol.Options{Logger: quietLogger, CacheBytes: 1 << 20})
	if err != nil {
		if dev.Closed() {
			t.Fatalf("Open failed (%v) and closed the device it does not own", err)
		}
		return
	}
	g := v.Geometry()
	dataBytes := int64(g.Clusters) * int64(g.ClusterSize)
	// Every entry the walk meets lies in a directory, and no directory may be listed twice.
	maxEntries := (dataBytes + g.RootDirSectors*int64(g.SectorSize)) / 32
	entries := 0
	var files []string
	fs.WalkDir(v, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			requireClearError(t, "walk "+p, err)
			return nil
		}
		if entries++; int64(entries) > maxEntries {
			t.Fatalf("walked %d entries, more than the %d the volume can hold: a directory listed twice", entries, maxEntries)
		}
		if d.IsDir() {
			return nil
		}
		files = append(files, p)
		f, err := v.Open(p)
		if err != nil {
			requireClearError(t, "open "+p, err)
			return nil
		}
		defer f.Close()
		n, err := io.Copy(io.Discard, f)
		if n > dataBytes {
			t.Fatalf("read %d bytes from %s, more than the %d bytes of the data area", n, p, dataBytes)
		}
		if err != nil {
			requireClearError(t, "read "+p, err)
		}
		return nil
	})
	wrote := writeNewFile(v, "fuzz-new.txt") == nil
	v.Mkdir("fuzz-dir")
	if len(files) > 0 {
		if f, err := v.OpenFile(files[0], os.O_RDWR, 0); err == nil {
			f.WriteAt([]byte("overwritten"), 3)
			f.Close()
		}
		v.Remove(files[len(files)-1])
	}
	if err := v.Close(); err != nil {
		wrote = false
	}
	if !wrote {
		return
	}
	// What the engine said it wrote must be there.
	v, err = fatvol.Open(dev, fatvol.Options{Logger: quietLogger, ReadOnly: true})
	if err != nil {
		t.Fatalf("reopen after a clean close: %v", err)
	}
	defer v.Close()
	got, err := fs.ReadFile(v, "fuzz-new.txt")
	if err != nil || !bytes.Equal(got, newFileData) {
		t.Fatalf("fuzz-new.txt after reopening: %d bytes, %v; want the %d bytes written", len(got), err, len(newFileData))
	}
}

func writeNewFile(v *fatvol.Volume, name string) error {
	f, err := v.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(newFileData); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// requireClearError accepts what a damaged volume may answer: corruption (EIO) or an errno that
// says what is wrong with the path.
func requireClearError(t *testing.T, what string, err error) {
	t.Helper()
	var errno syscall.Errno
	if errors.Is(err, fatvol.ErrCorrupt) || errors.As(err, &errno) {
		return
	}
	t.Fatalf("%s: %v is neither corruption nor an errno", what, err)
}
