package usbtest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestNewHost builds a tree at a given directory, attaches a stick, and checks that Close
// detaches it and removes the directory.
func TestNewHost(t *testing.T) {
	testenv.RequireLoop(t)
	dir := filepath.Join(t.TempDir(), "tree")
	f, err := NewHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewHost(dir); err == nil {
		t.Error("NewHost over an existing directory succeeded")
	}
	s, err := f.Attach(1<<20, "Vendor", "Model", "SER1")
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	back, err := BackingFile(s)
	if err != nil || filepath.Dir(filepath.Dir(back)) != dir {
		t.Errorf("backing file %q (%v), want one under %s", back, err, dir)
	}
	if target, err := os.Readlink(filepath.Join(f.ByIDDir, "usb-Vendor_Model_SER1-0:0")); err != nil || target != s.Loop {
		t.Errorf("by-id link to %q (%v), want %s", target, err, s.Loop)
	}
	if got, err := os.ReadFile(filepath.Join(f.SysfsRoot, "block", s.Kernel, "size")); err != nil || string(got) != "2048\n" {
		t.Errorf("sysfs size %q (%v), want 2048 sectors", got, err)
	}
	if target, err := os.Readlink(filepath.Join(f.ByPathDir, s.ByPath)); err != nil || target != s.Loop {
		t.Errorf("by-path link %s to %q (%v), want %s", s.ByPath, target, err, s.Loop)
	}
	// A second stick, detached on its own: the first stays.
	s2, err := f.Attach(1<<20, "Vendor", "Model", "SER2")
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	back2, _ := BackingFile(s2)
	if err := f.Detach(s2); err != nil {
		t.Error(err)
	}
	for _, p := range []string{s2.SysDir, s2.ByIDLink, s2.ByPathLink, back2} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after Detach: %v", p, err)
		}
	}
	if _, err := BackingFile(s2); err == nil {
		t.Errorf("%s still attached after Detach", s2.Loop)
	}
	if len(f.Sticks) != 1 || f.Sticks[0] != s {
		t.Errorf("sticks after Detach: %v", f.Sticks)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after Close: %v", dir, err)
	}
	if _, err := BackingFile(s); err == nil {
		t.Errorf("%s still attached after Close", s.Loop)
	}
}
