package fatfuse

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestTakeOverOpenFiles: handles opened before a takeover carry on under the new server, across
// a rename done before it; a directory read half-way goes on where it stopped; a file removed
// while open fails with EIO rather than reach another file (its anchor died with the server);
// after a crash a handle with writes not fsynced gets EIO once, then works; after a planned
// hand-over nothing is lost, not even writes never fsynced.
func TestTakeOverOpenFiles(t *testing.T) {
	for _, planned := range []bool{false, true} {
		t.Run(map[bool]string{false: "SIGKILL", true: "Pause"}[planned], func(t *testing.T) {
			needTools(t, "mkfs.fat", "fsck.fat")
			h := hold(t, makeImage(t, 32<<10, "-F", "16"))
			h.start("serve")
			p := func(name string) string { return filepath.Join(h.dir, name) }
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(os.MkdirAll(p("sub"), 0o755))
			must(os.MkdirAll(p("list"), 0o755))
			var want []string
			for i := range 6 {
				name := fmt.Sprintf("x%d", i)
				want = append(want, name)
				must(os.WriteFile(p("list/"+name), nil, 0o644))
			}

			a, err := os.Create(p("a.txt"))
			must(err)
			defer a.Close()
			_, err = a.WriteString("one")
			must(err)
			must(a.Sync())
			must(os.Rename(p("a.txt"), p("sub/b.txt")))

			u, err := os.Create(p("u.txt"))
			must(err)
			defer u.Close()
			_, err = u.WriteString("removed while open")
			must(err)
			must(u.Sync())
			must(os.Remove(p("u.txt")))

			// Made durable through another descriptor: nothing of it can be lost.
			o, err := os.Create(p("o.txt"))
			must(err)
			defer o.Close()
			_, err = o.WriteString("synced elsewhere")
			must(err)
			other, err := os.Open(p("o.txt"))
			must(err)
			must(other.Sync())
			other.Close()

			d, err := os.Open(p("list"))
			must(err)
			defer d.Close()
			first, err := d.Readdirnames(2)
			must(err)
			w, err := os.Create(p("w.txt"))
			must(err)
			defer w.Close()
			sub, err := os.Open(p("sub"))
			must(err)
			must(sub.Sync()) // the rename and w.txt's entry are on the medium
			sub.Close()
			// Written after the last sync of the volume (a directory's fsync syncs it whole).
			_, err = w.WriteString("never fsynced")
			must(err)

			if planned {
				h.pause()
			} else {
				h.kill()
			}
			h.start("takeover")

			_, err = a.WriteString(" two")
			must(err)
			must(a.Sync())
			if b, err := os.ReadFile(p("sub/b.txt")); err != nil || string(b) != "one two" {
				t.Errorf("sub/b.txt: %q, %v", b, err)
			}
			if fi, err := a.Stat(); err != nil || fi.Size() != 7 {
				t.Errorf("fstat of the renamed file: %v, %v", fi, err)
			}

			rest, err := d.Readdirnames(-1)
			must(err)
			got := slices.Sorted(slices.Values(append(first, rest...)))
			if !slices.Equal(got, want) {
				t.Errorf("a listing read across the takeover: %v, want %v", got, want)
			}

			buf := make([]byte, 8)
			if _, err := u.ReadAt(buf, 0); !errors.Is(err, syscall.EIO) {
				t.Errorf("read of a file removed while open: %v, want EIO", err)
			}
			if _, err := u.WriteString("x"); !errors.Is(err, syscall.EIO) {
				t.Errorf("write to a file removed while open: %v, want EIO", err)
			}

			if _, err := o.WriteString(", then more"); err != nil {
				t.Errorf("write to a handle whose writes were synced through another descriptor: %v", err)
			}
			if b, err := os.ReadFile(p("o.txt")); err != nil || string(b) != "synced elsewhere, then more" {
				t.Errorf("o.txt: %q, %v", b, err)
			}

			_, err = w.WriteString(", then more")
			if !planned {
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("first write after a crash lost what the handle wrote: %v, want EIO", err)
				}
				_, err = w.WriteAt([]byte("written again, then more"), 0)
			}
			must(err)
			must(w.Sync())
			wantW := "never fsynced, then more"
			if !planned {
				wantW = "written again, then more"
			}
			if b, err := os.ReadFile(p("w.txt")); err != nil || string(b) != wantW {
				t.Errorf("w.txt: %q, %v; want %q", b, err, wantW)
			}

			a.Close()
			u.Close()
			o.Close()
			w.Close()
			d.Close()
			h.unmount()
			fsckClean(t, h.img)
		})
	}
}
