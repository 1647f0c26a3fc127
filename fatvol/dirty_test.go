package fatvol_test

import (
	"os"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
)

// TestDirtyAtOpen: a volume whose dirty bit was set before it was opened (an unclean unmount)
// keeps it through a clean Close, as Linux vfat leaves it for fsck, unless the caller checked it
// (Options.Checked); OpenedDirty tells which it was.
func TestDirtyAtOpen(t *testing.T) {
	for _, spec := range []volumeSpec{fat12, fat32} {
		t.Run(spec.name, func(t *testing.T) {
			img := makeImage(t, spec)
			v := openVolume(t, img)
			off := bootStateOffset(v.Geometry().Type)
			if v.OpenedDirty() {
				t.Errorf("OpenedDirty on a fresh volume")
			}
			closeVolume(t, v)
			setDirty := func() {
				f, err := os.OpenFile(img, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if _, err := f.WriteAt([]byte{readImageByte(t, img, off) | 1}, off); err != nil {
					t.Fatal(err)
				}
			}

			setDirty()
			v = openVolume(t, img)
			if !v.OpenedDirty() {
				t.Errorf("OpenedDirty false on a volume whose dirty bit was set")
			}
			writeVolumeFile(t, v, "f", []byte("x"))
			closeVolume(t, v)
			if b := readImageByte(t, img, off); b&1 == 0 {
				t.Errorf("state byte %#x after a clean Close of a volume found dirty, want the dirty bit kept", b)
			}

			v = openVolumeWith(t, img, fatvol.Options{Checked: true})
			if !v.OpenedDirty() {
				t.Errorf("OpenedDirty false on a volume left dirty")
			}
			closeVolume(t, v)
			if b := readImageByte(t, img, off); b&1 != 0 {
				t.Errorf("state byte %#x after a clean Close of a checked volume, want the dirty bit clear", b)
			}
			checkClean(t, img)
		})
	}
}
