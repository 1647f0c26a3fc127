package judge

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/fsck"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

func mkfs(t *testing.T) string {
	t.Helper()
	testenv.RequireTool(t, "mkfs.fat")
	img := filepath.Join(t.TempDir(), "v.img")
	if out, err := exec.Command("truncate", "-s", "16M", img).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v: %s", err, out)
	}
	if out, err := exec.Command("mkfs.fat", "-F", "16", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat: %v: %s", err, out)
	}
	return img
}

func patch(t *testing.T, img string, off int64, b ...byte) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCheck(t *testing.T) {
	img := mkfs(t)
	if err := Check(img); err != nil {
		t.Fatalf("a fresh mkfs.fat image: %v", err)
	}
	// The dirty bit (byte 37 on FAT16) is a finding unless the caller expects it.
	patch(t, img, 37, 1)
	if err := Check(img); !errors.Is(err, ErrUnclean) {
		t.Errorf("dirty bit set: Check = %v, want ErrUnclean", err)
	}
	if err := Check(img, fsck.Dirty); err != nil {
		t.Errorf("dirty bit set and expected: %v", err)
	}
	// A cluster marked used in the FAT with nothing pointing at it: both judges see it.
	patch(t, img, 37, 0)
	boot := make([]byte, 512)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	f.ReadAt(boot, 0)
	f.Close()
	fatStart := (int64(boot[14]) | int64(boot[15])<<8) * 512 // reserved sectors of 512 bytes
	patch(t, img, fatStart+2*5, 0xFF, 0xFF)                  // cluster 5: end of chain, unowned
	err = Check(img)
	if !errors.Is(err, ErrUnclean) {
		t.Fatalf("lost cluster: Check = %v, want ErrUnclean", err)
	}
	theirs, _ := FsckFat(img)
	ours, _ := Ours(img)
	if len(theirs) == 0 || len(ours) == 0 {
		t.Errorf("lost cluster seen by fsck.fat: %q, by ours: %v; want both", theirs, ours)
	}
}
