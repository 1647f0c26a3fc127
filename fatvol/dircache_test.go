package fatvol_test

import (
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"
)

// dirCacheTree fills img with dirs directories of files files each, every file with a long name
// and its path as its content, and returns their attributes as read by a volume that keeps
// every directory.
func dirCacheTree(t *testing.T, img string, dirs, files int) map[string]fatvol.Attr {
	t.Helper()
	v := openVolume(t, img)
	for d := range dirs {
		dir := fmt.Sprintf("directory-%03d", d)
		if err := v.Mkdir(dir); err != nil {
			t.Fatal(err)
		}
		for f := range files {
			name := fmt.Sprintf("%s/a file with a long name %03d.txt", dir, f)
			writeVolumeFile(t, v, name, []byte(name))
		}
	}
	closeVolume(t, v)
	v = openVolumeWith(t, img, fatvol.Options{DirCacheBytes: 1 << 30})
	want := walkAttrs(t, v, nil)
	closeVolume(t, v)
	if len(want) != dirs*(files+1) {
		t.Fatalf("walked %d entries, made %d", len(want), dirs*(files+1))
	}
	return want
}

// walkAttrs lists every directory below the root, stats and reads every file, and returns what
// Stat says of each. Each directory done, it calls after.
func walkAttrs(t *testing.T, v *fatvol.Volume, after func(dir string)) map[string]fatvol.Attr {
	t.Helper()
	got := map[string]fatvol.Attr{}
	top, err := v.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range top {
		got[de.Name()] = statAttr(t, v, de.Name())
		entries, err := v.ReadDir(de.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			p := de.Name() + "/" + e.Name()
			got[p] = statAttr(t, v, p)
			if data := readVolumeFile(t, v, p); string(data) != p {
				t.Fatalf("%s holds %q", p, data)
			}
		}
		if after != nil {
			after(de.Name())
		}
	}
	return got
}

func statAttr(t *testing.T, v *fatvol.Volume, name string) fatvol.Attr {
	t.Helper()
	fi, err := v.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return *fi.Sys().(*fatvol.Attr)
}

func requireSameAttrs(t *testing.T, want, got map[string]fatvol.Attr) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d entries, want %d", len(got), len(want))
	}
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			t.Errorf("%s missing", p)
		case g != w:
			t.Errorf("%s: %+v, want %+v", p, g, w)
		}
	}
}

// TestDirCacheBound walks 120 directories of 60 files each under a directory cache of 256 KiB
// (about 8 of those directories): what the volume holds stays within the bound and one
// directory beyond it, and every directory read again gives the same names, attributes and
// positions (Pos, the FUSE server's inode numbers), and the same bytes. Without the bound the
// same walk holds every directory.
func TestDirCacheBound(t *testing.T) {
	const dirs, files, bound = 120, 60, 256 << 10
	img := makeImage(t, fat32)
	want := dirCacheTree(t, img, dirs, files)

	v := openVolumeWith(t, img, fatvol.Options{DirCacheBytes: bound})
	var peak fatvol.DirCache
	track := func(string) {
		if c := v.DirCache(); c.Bytes > peak.Bytes {
			peak = c
		}
	}
	requireSameAttrs(t, want, walkAttrs(t, v, track))
	// The directory being walked may hold more than the bound's share: one past it at most,
	// with the root.
	oneDir := 2 * (1<<10 + 4<<10 + files*320 + files*4*2)
	if peak.Bytes > bound+int64(oneDir) {
		t.Errorf("held %d directories of %d bytes at most, bound %d", peak.Dirs, peak.Bytes, bound)
	}
	t.Logf("a walk of %d directories of %d files under a bound of %d: at most %d directories, %d bytes", dirs, files, bound, peak.Dirs, peak.Bytes)
	// Twice: the second walk reads again what the first dropped.
	requireSameAttrs(t, want, walkAttrs(t, v, track))
	closeVolume(t, v)

	v = openVolumeWith(t, img, fatvol.Options{DirCacheBytes: 1 << 30})
	walkAttrs(t, v, nil)
	if all := v.DirCache(); all.Dirs != dirs+1 || all.Bytes < 10*bound {
		t.Errorf("without a bound the walk holds %d directories of %d bytes; want all %d and far more than %d", all.Dirs, all.Bytes, dirs+1, bound)
	}
	closeVolume(t, v)
	checkClean(t, img)
}

// TestDirCacheOpenFiles keeps files open, renames one and removes another while their
// directories go and come back under a small bound: handles reach their files, Stat through
// them keeps their positions, changes made before a directory went are read back, and the
// volume is clean after.
func TestDirCacheOpenFiles(t *testing.T) {
	const dirs, files, bound = 40, 30, 16 << 10
	img := makeImage(t, fat32)
	want := dirCacheTree(t, img, dirs, files)

	v := openVolumeWith(t, img, fatvol.Options{DirCacheBytes: bound})
	const (
		kept    = "directory-003/a file with a long name 007.txt"
		moved   = "directory-005/a file with a long name 001.txt"
		movedTo = "directory-030/moved here.txt"
		removed = "directory-010/a file with a long name 002.txt"
		added   = "directory-020/added later.txt"
	)
	open := func(name string) *fatvol.File {
		f, err := v.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	fk, fm, fr := open(kept), open(moved), open(removed)
	posOf := func(f *fatvol.File) int64 {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*fatvol.Attr).Pos
	}
	if p := posOf(fr); p != want[removed].Pos {
		t.Fatalf("%s open at %d, listed at %d", removed, p, want[removed].Pos)
	}
	if err := v.Rename(moved, movedTo); err != nil {
		t.Fatal(err)
	}
	if err := v.Remove(removed); err != nil {
		t.Fatal(err)
	}
	writeVolumeFile(t, v, added, []byte("added"))
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	removedPos := posOf(fr)

	// Walk everything but what changed, twice, so that every directory not held goes.
	walk := func() {
		for d := range dirs {
			dir := fmt.Sprintf("directory-%03d", d)
			entries, err := v.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				statAttr(t, v, dir+"/"+e.Name())
			}
		}
	}
	walk()
	walk()
	if c := v.DirCache(); c.Dirs > dirs/2 {
		t.Fatalf("%d directories held under a bound of %d bytes", c.Dirs, bound)
	}

	for _, f := range []*fatvol.File{fk, fm, fr} {
		if _, err := f.WriteAt([]byte("written after the walk"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if p := posOf(fk); p != want[kept].Pos {
		t.Errorf("%s: position %d after the walk, %d before", kept, p, want[kept].Pos)
	}
	if p := posOf(fr); p != removedPos {
		t.Errorf("removed %s: position %d after the walk, %d before", removed, p, removedPos)
	}
	for _, f := range []*fatvol.File{fk, fm, fr} {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.Stat(removed); err == nil {
		t.Errorf("%s is back after its directory was read again", removed)
	}
	if got := string(readVolumeFile(t, v, added)); got != "added" {
		t.Errorf("%s holds %q", added, got)
	}
	for _, name := range []string{kept, movedTo} {
		data := readVolumeFile(t, v, name)
		if string(data[:22]) != "written after the walk" {
			t.Errorf("%s holds %q", name, data)
		}
	}
	if _, err := v.Stat(moved); err == nil {
		t.Errorf("%s is still there after its rename", moved)
	}
	closeVolume(t, v)
	checkClean(t, img)

	v = openVolume(t, img)
	got := walkAttrsLoose(t, v)
	for p, w := range want {
		switch p {
		case moved, removed, kept:
			continue
		}
		if g, ok := got[p]; !ok || g.Pos != w.Pos || g.FirstCluster != w.FirstCluster {
			t.Errorf("%s: %+v, want %+v", p, g, w)
		}
	}
	if _, ok := got[movedTo]; !ok {
		t.Errorf("%s missing after a fresh open", movedTo)
	}
	closeVolume(t, v)
}

// walkAttrsLoose is walkAttrs without reading the files' content.
func walkAttrsLoose(t *testing.T, v *fatvol.Volume) map[string]fatvol.Attr {
	got := map[string]fatvol.Attr{}
	err := fs.WalkDir(v, ".", func(p string, _ fs.DirEntry, err error) error {
		if err == nil && p != "." {
			got[p] = statAttr(t, v, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestDirCacheEntryBytes measures what a directory in memory holds per entry beside its raw
// bytes, the figure the cache counts (dirEntryBytes, 320): never more than a tenth above it (the
// maps' load makes it 160-321 bytes as a directory grows), nor less than half of it.
func TestDirCacheEntryBytes(t *testing.T) {
	const files = 2000
	img := makeImage(t, fat32)
	v := openVolume(t, img)
	if err := v.Mkdir("d"); err != nil {
		t.Fatal(err)
	}
	for f := range files {
		f, err := v.Create(fmt.Sprintf("d/a file with a long name %04d.txt", f))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	closeVolume(t, v)
	v = openVolume(t, img)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := v.SubdirCount("d"); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	c := v.DirCache()
	raw := int64(3*files+2) * 32 // each name takes two long-name entries and its short one
	perEntry := (int64(after.HeapAlloc) - int64(before.HeapAlloc) - raw) / files
	t.Logf("%d bytes a file beside its %d raw bytes; the cache counts %d bytes for the directory", perEntry, raw/files, c.Bytes)
	if perEntry > 320*11/10 || perEntry < 320/2 {
		t.Errorf("a directory holds %d bytes a file beside its raw bytes; the cache counts 320", perEntry)
	}
	runtime.KeepAlive(v)
}

// TestDirCacheWhileCreating: directories being filled cannot go before they are written back.
// Past twice the bound, the background writer writes them back at its next tick (a sixth of
// DirtyExpire here) rather than once DirtyExpire has passed, and they go.
func TestDirCacheWhileCreating(t *testing.T) {
	const dirs, files, bound = 100, 50, 64 << 10
	expire := 30 * time.Second
	img := makeImage(t, fat32)
	v := openVolumeWith(t, img, fatvol.Options{DirCacheBytes: bound, DirtyExpire: expire})
	for d := range dirs {
		dir := fmt.Sprintf("directory-%03d", d)
		if err := v.Mkdir(dir); err != nil {
			t.Fatal(err)
		}
		for f := range files {
			f, err := v.Create(fmt.Sprintf("%s/a file with a long name %03d.txt", dir, f))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	held := v.DirCache()
	if held.Bytes <= 2*bound {
		t.Fatalf("%d bytes of directories held right after creating them: the test needs them dirty", held.Bytes)
	}
	start := time.Now()
	for v.DirCache().Bytes > 2*bound {
		if time.Since(start) > expire/2 {
			t.Fatalf("%d directories of %d bytes still held after %v (bound %d)", v.DirCache().Dirs, v.DirCache().Bytes, time.Since(start), bound)
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := v.Stat("directory-000"); err != nil { // an operation: its end trims
			t.Fatal(err)
		}
	}
	t.Logf("%d bytes of directories held after the creates, %d after %v", held.Bytes, v.DirCache().Bytes, time.Since(start).Round(time.Millisecond))
	closeVolume(t, v)
	checkClean(t, img)
}
