package fsck_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
)

// TestCheckMemoryBound: a check held to a memory bound checks a volume that fits as an unbounded
// check does; one whose entries do not fit stops with a Limit error that names the bound (and a
// repair within it writes nothing); one whose FAT alone does not fit fails with ErrMemory.
func TestCheckMemoryBound(t *testing.T) {
	img := filepath.Join(t.TempDir(), "many.img")
	dev, err := blockdev.CreateImage(img, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mkfs.Format(dev, mkfs.Options{}); err != nil {
		t.Fatal(err)
	}
	vol, err := fatvol.Open(dev, fatvol.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const files = 5000
	if err := vol.Mkdir("DCIM"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < files; i++ {
		f, err := vol.Create(fmt.Sprintf("DCIM/photo-with-a-long-name-%05d.jpg", i))
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := vol.Close(); err != nil {
		t.Fatal(err)
	}
	check := func(max int64) (*fsck.Report, error) {
		t.Helper()
		dev, err := blockdev.Open(img, true)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		return fsck.CheckWith(dev, fsck.Options{MaxMemory: max})
	}
	for _, max := range []int64{0, 16 << 20} {
		rep, err := check(max)
		if err != nil || !rep.Clean() || rep.Files != files {
			t.Fatalf("bound %d: %v, %+v; want clean with %d files", max, err, rep, files)
		}
	}
	rep, err := check(5 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Clean() || !rep.Has(fsck.Limit) || len(rep.Unrepairable()) == 0 || !strings.Contains(fmt.Sprint(rep.Problems), "may use 5 MiB") {
		t.Fatalf("within 5 MiB: %+v; want a Limit error naming the bound", rep.Problems)
	}
	rw, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	res, err := fsck.RepairWith(rw, fsck.Options{MaxMemory: 5 << 20})
	rw.Close()
	if err != nil || res.Changed() || len(res.Unrepairable) == 0 {
		t.Fatalf("repair within 5 MiB: %+v, %v; want nothing written and the limit unrepairable", res, err)
	}
	if _, err := check(1 << 20); !errors.Is(err, fsck.ErrMemory) || !strings.Contains(err.Error(), "may use 1 MiB") {
		t.Fatalf("within 1 MiB: %v; want ErrMemory naming the bound", err)
	}
	if rep, err := check(0); err != nil || !rep.Clean() {
		t.Fatalf("after the bounded repair: %v, %+v; want the volume as it was", err, rep)
	}
}
