package fatvol_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/internal/judge"
)

// capacityName makes the i-th name of a directory-capacity fill that takes slots directory
// entries: a short name alone (1), a long name of two long-name entries (3), of eight (9).
func capacityName(slots, i int) string {
	switch slots {
	case 1:
		return fmt.Sprintf("F%05d", i)
	case 3:
		return fmt.Sprintf("file number %05d.txt", i) // 20 characters
	default:
		return fmt.Sprintf("%s%04d.txt", strings.Repeat("a long name ", 8), i) // 104 characters
	}
}

// TestDirectoryCapacity: a directory holds what the format allows, as vfat's: names are packed,
// crossing sectors where they must, so a subdirectory takes floor(65,534 / slots) names (65,536
// entries less '.' and '..') and a FAT16 root of 512 entries floor(512 / slots). Then it is
// full: the next create fails with ENOSPC, as on Linux, and after a removal a create succeeds
// again. fsck.fat -n and our fsck find nothing, and mdir lists every name.
func TestDirectoryCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("fills directories to 65,536 entries")
	}
	requireTools(t, "mkfs.fat", "fsck.fat", "mdir")
	vols := []struct {
		spec volumeSpec
		dir  string // "" for the root
		room int    // entries for names
	}{
		{volumeSpec{"FAT12", 12 << 20, []string{"-F", "12", "-s", "8"}}, "d", 65534},
		{volumeSpec{"FAT16", 32 << 20, []string{"-F", "16", "-s", "4"}}, "d", 65534},
		{volumeSpec{"FAT32", 40 << 20, []string{"-F", "32", "-s", "1"}}, "d", 65534},
		{volumeSpec{"FAT16-root", 32 << 20, []string{"-F", "16", "-s", "4", "-r", "512"}}, "", 512},
	}
	for _, vc := range vols {
		if raceEnabled && vc.dir != "" && vc.spec.name != "FAT16" {
			// The race detector makes fills of 65,536 entries slow: one type does there.
			continue
		}
		for _, slots := range []int{1, 3, 9} {
			t.Run(fmt.Sprintf("%s/%d-slot", vc.spec.name, slots), func(t *testing.T) {
				if got := len(capacityName(slots, 1)); slots == 9 && got != 104 {
					t.Fatalf("a nine-slot name has %d characters", got)
				}
				img := makeImage(t, vc.spec)
				v := openVolume(t, img)
				prefix := ""
				if vc.dir != "" {
					if err := v.Mkdir(vc.dir); err != nil {
						t.Fatal(err)
					}
					prefix = vc.dir + "/"
				}
				want := vc.room / slots
				n := 0
				var err error
				for ; n <= want; n++ {
					var f *fatvol.File
					f, err = v.OpenFile(prefix+capacityName(slots, n), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
					if err != nil {
						break
					}
					f.Close()
				}
				if n != want || !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("%d names fit (the format allows %d), then: %v (want ENOSPC)", n, want, err)
				}
				if err := v.Remove(prefix + capacityName(slots, want/2)); err != nil {
					t.Fatal(err)
				}
				if f, err := v.OpenFile(prefix+capacityName(slots, want+1), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
					t.Fatalf("a create after a removal from the full directory: %v", err)
				} else {
					f.Close()
				}
				closeVolume(t, v)
				// fsck.fat compares every two names of a directory: 65,534 of them take it a
				// minute, so it judges the full one-slot directory on FAT32 only.
				if slots > 1 || vc.spec.name == "FAT32" {
					if err := judge.Check(img); err != nil {
						t.Fatal(err)
					}
				} else if probs, err := judge.Ours(img); err != nil || len(probs) > 0 {
					t.Fatalf("fsck.Check: %v %v", probs, err)
				}
				dir := "::/" + vc.dir
				cmd := exec.Command("mdir", "-b", "-i", img, dir)
				cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1", "LC_ALL=C.UTF-8")
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("mdir %s: %v", dir, err)
				}
				if lines := strings.Count(string(out), "\n"); lines != want {
					t.Errorf("mdir lists %d names, want %d", lines, want)
				}
			})
		}
	}
}
