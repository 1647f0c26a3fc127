package fatvol_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// interruptedRename makes on img what a cut in the middle of moving new/msg (and the directory
// a/d) to cur/ leaves: the new entries written and marked, the old ones still there, the volume
// dirty. It returns msg's bytes.
func interruptedRename(t *testing.T, img string) []byte {
	t.Helper()
	v := openVolume(t, img)
	for _, d := range []string{"new", "cur", "a", "a/d"} {
		if err := v.Mkdir(d); err != nil {
			t.Fatal(err)
		}
	}
	data := bytes.Repeat([]byte("message "), 700)
	for _, name := range []string{"new/msg", "a/d/f"} {
		f, err := v.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	attr := func(name string) *fatvol.Attr {
		fi, err := v.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*fatvol.Attr)
	}
	msg, d, cur := attr("new/msg"), attr("a/d"), attr("cur")
	g := v.Geometry()
	boot, err := ondisk.ParseBootSector(mustReadAt(t, img, 0, 512))
	if err != nil {
		t.Fatal(err)
	}
	closeVolume(t, v)
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	slot := g.ClusterOffset(cur.FirstCluster) + 2*ondisk.DirEntrySize // after '.' and '..'
	for _, pos := range []int64{msg.Pos, d.Pos} {
		copy(b[slot:slot+ondisk.DirEntrySize], b[pos:pos+ondisk.DirEntrySize])
		b[slot+12] |= ondisk.RenameNew
		slot += ondisk.DirEntrySize
	}
	b[boot.StateOffset()] |= ondisk.StateDirty
	if err := os.WriteFile(img, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

func mustReadAt(t *testing.T, path string, off, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInterruptedRenameAtOpen: a volume a cut left in the middle of renames reads under both names
// when opened read-only (one file, not damage), and an open for writing completes the renames
// (the new names kept, as a journal replay would) without calling the volume damaged.
func TestInterruptedRenameAtOpen(t *testing.T) {
	for _, spec := range crashVolumes {
		t.Run(spec.name, func(t *testing.T) {
			img := makeImage(t, spec)
			data := interruptedRename(t, img)

			ro := openVolumeWith(t, img, fatvol.Options{ReadOnly: true})
			for _, name := range []string{"new/msg", "cur/msg", "a/d/f", "cur/d/f"} {
				if got, err := readAllFrom(ro, name); err != nil || !bytes.Equal(got, data) {
					t.Errorf("read-only, %s: %d bytes, %v", name, len(got), err)
				}
			}
			if err := ro.Damage(); err != nil {
				t.Errorf("read-only: the two names are taken for damage: %v", err)
			}
			closeVolume(t, ro)

			v := openVolume(t, img)
			for _, name := range []string{"new/msg", "a/d"} {
				if _, err := v.Stat(name); err == nil {
					t.Errorf("%s: the old name is still there", name)
				}
			}
			for _, name := range []string{"cur/msg", "cur/d/f"} {
				if got, err := readAllFrom(v, name); err != nil || !bytes.Equal(got, data) {
					t.Errorf("%s: %d bytes, %v", name, len(got), err)
				}
			}
			if err := v.Damage(); err != nil {
				t.Errorf("damaged: %v", err)
			}
			if err := v.Mkdir("cur/d/more"); err != nil {
				t.Errorf("a change after the open: %v", err)
			}
			closeVolume(t, v)
			dev, err := blockdev.Open(img, true)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			rep, err := fsck.Check(dev)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rep.Errors() {
				if p.Kind != fsck.Dirty {
					t.Errorf("after the open: %v %s", p.Kind, p)
				}
			}
		})
	}
}
