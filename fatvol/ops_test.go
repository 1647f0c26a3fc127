package fatvol_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// bootStateOffset is where the boot sector keeps the state byte whose bit 0 is Linux's dirty bit:
// in the extended BPB, at 37 on FAT12/16 and 65 on FAT32 (Microsoft's FAT specification).
func bootStateOffset(typ ondisk.FATType) int64 {
	if typ == ondisk.FAT32 {
		return 65
	}
	return 37
}

func readImageByte(t testing.TB, img string, off int64) byte {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b[0]
}

// checkCleanWhileOpen syncs the volume and checks a copy of the image as it is on disk at that
// moment, with the dirty bit (set while open) cleared in the copy: what a crash right after the
// last operation would leave.
func checkCleanWhileOpen(t testing.TB, v *fatvol.Volume, img string) string {
	t.Helper()
	if err := v.Sync(); err != nil {
		t.Fatalf("sync: %v", err)
	}
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	// The engine sets the bit in FAT32's backup boot sector too (so that fsck.fat, which compares
	// the two, sees them agree): clear both. The boot sector names the backup at byte 50.
	state := bootStateOffset(v.Geometry().Type)
	data[state] &^= 1
	if v.Geometry().Type == ondisk.FAT32 {
		if backup := int64(binary.LittleEndian.Uint16(data[50:])); backup != 0 {
			data[backup*int64(binary.LittleEndian.Uint16(data[11:]))+state] &^= 1
		}
	}
	snap := filepath.Join(t.TempDir(), "snapshot.img")
	if err := os.WriteFile(snap, data, 0o644); err != nil {
		t.Fatal(err)
	}
	checkClean(t, snap)
	return snap
}

// usedClusters parses fsck.fat's summary "N files, used/total clusters".
func usedClusters(t testing.TB, img string) (used, total int) {
	t.Helper()
	s := fsckSummary(t, img)
	var files int
	if _, err := fmt.Sscanf(s, "%d files, %d/%d clusters", &files, &used, &total); err != nil {
		t.Fatalf("fsck.fat summary %q: %v", s, err)
	}
	return used, total
}

func freeClusters(t testing.TB, v *fatvol.Volume) uint32 {
	t.Helper()
	st, err := v.StatFS()
	if err != nil {
		t.Fatal(err)
	}
	return st.FreeClusters
}

func imageSum(t testing.TB, img string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// TestFullVolumeENOSPC fills a volume: writes that need a cluster fail with ENOSPC and change
// nothing, the volume stays consistent, and freeing space makes it usable again.
func TestFullVolumeENOSPC(t *testing.T) {
	for _, spec := range []volumeSpec{
		fat12Small,
		{"FAT16-16MiB", 16 << 20, []string{"-F", "16"}},
		{"FAT32-34MiB", 34 << 20, []string{"-F", "32", "-s", "1"}},
	} {
		t.Run(spec.name, func(t *testing.T) {
			img := makeImage(t, spec)
			used, total := usedClusters(t, img)
			v := openVolume(t, img)
			cs := clusterSize(t, v)
			r := rand.New(rand.NewPCG(7, 7))
			f, err := v.Create("big")
			if err != nil {
				t.Fatal(err)
			}
			var written []byte
			for _, chunk := range []int{64 * cs, cs, 1} {
				for {
					data := randomBytes(r, chunk)
					n, err := f.Write(data)
					written = append(written, data[:n]...)
					if err != nil {
						wantErrno(t, "write to a full volume", err, syscall.ENOSPC)
						if n != 0 {
							t.Fatalf("a write that failed with ENOSPC wrote %d bytes", n)
						}
						break
					}
					if chunk == 1 && len(written)%cs == 0 {
						// The last cluster is full: the next byte needs a cluster there is not.
						break
					}
				}
			}
			if free := freeClusters(t, v); free != 0 {
				t.Fatalf("after filling, StatFS says %d clusters free", free)
			}
			_, err = f.Write([]byte{1})
			wantErrno(t, "write past the last cluster", err, syscall.ENOSPC)
			wantErrno(t, "mkdir on a full volume", v.Mkdir("dir"), syscall.ENOSPC)
			e, err := v.Create("empty")
			if err != nil {
				t.Fatalf("an empty file needs no cluster: %v", err)
			}
			_, err = e.Write([]byte("x"))
			wantErrno(t, "write to a new file on a full volume", err, syscall.ENOSPC)
			e.Close()
			if st, _ := f.Stat(); st.Size() != int64(len(written)) {
				t.Fatalf("size %d after ENOSPC, want %d", st.Size(), len(written))
			}
			f.Close()
			if got := readVolumeFile(t, v, "big"); !bytes.Equal(got, written) {
				t.Fatalf("content after ENOSPC differs %s", describeDiff(written, got))
			}
			closeVolume(t, v)
			checkClean(t, img)
			if nowUsed, nowTotal := usedClusters(t, img); nowUsed != nowTotal {
				t.Fatalf("fsck.fat counts %d/%d clusters used on a full volume", nowUsed, nowTotal)
			}

			v = openVolume(t, img)
			if err := v.Remove("big"); err != nil {
				t.Fatal(err)
			}
			if free := freeClusters(t, v); int(free) != total-used {
				t.Fatalf("after removing the only file, %d clusters free; fsck.fat counted %d on the new volume", free, total-used)
			}
			again := randomBytes(r, len(written)/2)
			writeVolumeFile(t, v, "again", again)
			if err := v.Mkdir("dir"); err != nil {
				t.Fatal(err)
			}
			closeVolume(t, v)
			checkClean(t, img)
			out := filepath.Join(t.TempDir(), "out")
			mtools(t, img, "mcopy", "-n", "::/again", out)
			if got, _ := os.ReadFile(out); !bytes.Equal(got, again) {
				t.Fatalf("mtools reads the file written after freeing space differently %s", describeDiff(again, got))
			}
		})
	}
}

// TestFixedRootFull: the fixed root directory of FAT12/16 cannot grow, so once its entries are
// used creating more fails with ENOSPC, and removing entries makes room again.
func TestFixedRootFull(t *testing.T) {
	for _, spec := range []volumeSpec{
		{"FAT12-root64", 4 << 20, []string{"-F", "12", "-r", "64"}},
		{"FAT16-root64", 64 << 20, []string{"-F", "16", "-r", "64"}},
	} {
		t.Run(spec.name, func(t *testing.T) {
			img := makeImage(t, spec)
			v := openVolume(t, img)
			// Upper-case 8.3 names take one entry each.
			n := 0
			for ; n < 1000; n++ {
				f, err := v.OpenFile(fmt.Sprintf("F%03d.TXT", n), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
				if err != nil {
					wantErrno(t, "create in a full root", err, syscall.ENOSPC)
					break
				}
				f.Close()
			}
			if n != 64 {
				t.Fatalf("the 64-entry root took %d files", n)
			}
			free := freeClusters(t, v)
			wantErrno(t, "mkdir in a full root", v.Mkdir("DIR"), syscall.ENOSPC)
			if got := freeClusters(t, v); got != free {
				t.Fatalf("a failed mkdir changed the free clusters from %d to %d", free, got)
			}
			// One free entry does not hold a name that needs long-name entries too.
			if err := v.Remove("F010.TXT"); err != nil {
				t.Fatal(err)
			}
			_, err := v.Create("a long name.txt")
			wantErrno(t, "create a long name in one free root entry", err, syscall.ENOSPC)
			writeVolumeFile(t, v, "G.TXT", []byte("fits"))
			// Three adjacent free entries hold "a long name.txt" (15 units: 2 long entries + 1).
			for _, name := range []string{"F020.TXT", "F021.TXT", "F022.TXT"} {
				if err := v.Remove(name); err != nil {
					t.Fatal(err)
				}
			}
			writeVolumeFile(t, v, "a long name.txt", []byte("fits too"))
			ents, err := v.ReadDir(".")
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 62 {
				t.Fatalf("root lists %d entries, want 62", len(ents))
			}
			closeVolume(t, v)
			checkClean(t, img)
			if out := mtools(t, img, "mdir", "-/", "-a", "::/"); !strings.Contains(out, "a long name.txt") || !strings.Contains(out, "G        TXT") {
				t.Fatalf("mdir does not show the new entries:\n%s", out)
			}
		})
	}
}

// TestUnlinkWhileOpen: a removed file stays readable and writable through its open handle; its
// clusters are freed at the last close.
func TestUnlinkWhileOpen(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	cs := clusterSize(t, v)
	r := rand.New(rand.NewPCG(1, 2))
	data := randomBytes(r, 10*cs)
	writeVolumeFile(t, v, "victim.bin", data)
	free := freeClusters(t, v)
	f, err := v.OpenFile("victim.bin", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Remove("victim.bin"); err != nil {
		t.Fatal(err)
	}
	_, err = v.Stat("victim.bin")
	wantErrno(t, "stat a removed file", err, syscall.ENOENT)
	more := randomBytes(r, cs)
	if _, err := f.WriteAt(more, int64(len(data))); err != nil {
		t.Fatalf("write to a removed open file: %v", err)
	}
	data = append(data, more...)
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read a removed open file: %v %s", err, describeDiff(data, got))
	}
	if got := freeClusters(t, v); got != free-1 {
		t.Fatalf("while open, the removed file holds %d clusters; want 11", free-got+10)
	}
	// The name is free for a new file meanwhile.
	writeVolumeFile(t, v, "victim.bin", []byte("new"))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := freeClusters(t, v); got != free+10-1 {
		t.Fatalf("after the last close %d clusters are free, want %d", got, free+10-1)
	}
	if got := readVolumeFile(t, v, "victim.bin"); string(got) != "new" {
		t.Fatalf("the new file reads %q", got)
	}
	closeVolume(t, v)
	checkClean(t, img)
}

// TestUnlinkWhileOpenThenCloseVolume: closing the volume while a removed file is still open
// must not leave its clusters allocated to nothing.
func TestUnlinkWhileOpenThenCloseVolume(t *testing.T) {
	img := makeImage(t, fat32)
	v := openVolume(t, img)
	writeVolumeFile(t, v, "orphan", bytes.Repeat([]byte("x"), 10*clusterSize(t, v)))
	f, err := v.OpenFile("orphan", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Remove("orphan"); err != nil {
		t.Fatal(err)
	}
	closeVolume(t, v)
	f.Close()
	checkClean(t, img)
}

// TestRenameOverExistingFile: the target is replaced in one step: its entry is rewritten in place
// (so the name never stops existing on disk), the old target's clusters are freed, and the volume
// is consistent right after the rename.
func TestRenameOverExistingFile(t *testing.T) {
	img := makeImage(t, fat32)
	v := openVolume(t, img)
	cs := clusterSize(t, v)
	r := rand.New(rand.NewPCG(3, 4))
	a, b := randomBytes(r, 3*cs), randomBytes(r, 5*cs)
	writeVolumeFile(t, v, "source file.txt", a)
	writeVolumeFile(t, v, "Target File.txt", b)
	before, err := v.Stat("Target File.txt")
	if err != nil {
		t.Fatal(err)
	}
	free := freeClusters(t, v)

	err = v.RenameWithFlags("source file.txt", "target file.txt", fatvol.RenameNoReplace)
	wantErrno(t, "rename with RenameNoReplace onto an existing file", err, syscall.EEXIST)

	if err := v.Rename("source file.txt", "target file.txt"); err != nil {
		t.Fatal(err)
	}
	_, err = v.Stat("source file.txt")
	wantErrno(t, "stat the renamed source", err, syscall.ENOENT)
	after, err := v.Stat("target file.txt")
	if err != nil {
		t.Fatal(err)
	}
	if after.Sys().(*fatvol.Attr).Pos != before.Sys().(*fatvol.Attr).Pos {
		t.Errorf("the target's entry moved from %d to %d: it was not replaced in place",
			before.Sys().(*fatvol.Attr).Pos, after.Sys().(*fatvol.Attr).Pos)
	}
	if got := readVolumeFile(t, v, "Target File.txt"); !bytes.Equal(got, a) {
		t.Fatalf("the target reads %s", describeDiff(a, got))
	}
	if got := freeClusters(t, v); got != free+5 {
		t.Fatalf("%d clusters free after the rename, want %d (the old target's 5 freed)", got, free+5)
	}
	snap := checkCleanWhileOpen(t, v, img)
	out := filepath.Join(t.TempDir(), "out")
	mtools(t, snap, "mcopy", "-s", "-n", "::/", out)
	want := newTree()
	want.addFile("Target File.txt", a)
	requireSameTree(t, "mtools after rename over an existing file", want, readTree(t, os.DirFS(out)))
	closeVolume(t, v)
	checkClean(t, img)
}

// TestRenameOverOpenFile: a replaced file that is still open keeps its data until closed.
func TestRenameOverOpenFile(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	writeVolumeFile(t, v, "new", []byte("new content"))
	writeVolumeFile(t, v, "old", []byte("old content"))
	f, err := v.Open("old")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Rename("new", "old"); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(f); err != nil || string(got) != "old content" {
		t.Fatalf("the replaced file's handle reads %q, %v", got, err)
	}
	if got := readVolumeFile(t, v, "old"); string(got) != "new content" {
		t.Fatalf("the name reads %q", got)
	}
	f.Close()
	closeVolume(t, v)
	checkClean(t, img)
}

// TestRenameDirIntoOwnSubtree: a directory cannot move under itself.
func TestRenameDirIntoOwnSubtree(t *testing.T) {
	img := makeImage(t, fat12)
	v := openVolume(t, img)
	for _, d := range []string{"a", "a/b", "a/b/c"} {
		if err := v.Mkdir(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, target := range []string{"a/x", "a/b/x", "a/b/c/x", "A/B/x"} {
		wantErrno(t, "rename a -> "+target, v.Rename("a", target), syscall.EINVAL)
	}
	wantErrno(t, "rename a/b -> a/b/c/x", v.Rename("a/b", "a/b/c/x"), syscall.EINVAL)
	if _, err := v.Stat("a/b/c"); err != nil {
		t.Fatalf("the tree changed: %v", err)
	}
	closeVolume(t, v)
	checkClean(t, img)
}

// TestRenameAcrossDirsFixesDotDot moves directories between parents, to and from the root, on
// every FAT type: fsck.fat checks that each '..' points at the new parent (cluster 0 for the
// root), and mtools follows the moved tree.
func TestRenameAcrossDirsFixesDotDot(t *testing.T) {
	for _, spec := range []volumeSpec{fat12, fat16, fat32} {
		t.Run(spec.name, func(t *testing.T) {
			img := makeImage(t, spec)
			v := openVolume(t, img)
			for _, d := range []string{"x", "x/sub", "x/sub/inner", "y"} {
				if err := v.Mkdir(d); err != nil {
					t.Fatal(err)
				}
			}
			writeVolumeFile(t, v, "x/sub/inner/file.txt", []byte("moved around\n"))
			steps := []struct{ from, to string }{
				{"x/sub", "y/moved"},               // between subdirectories
				{"y/moved/inner", "inner at root"}, // to the root
				{"inner at root", "x/back"},        // from the root
				{"y/moved", "x/back/deeper"},       // under a moved directory
			}
			want := "x/back/deeper"
			for _, s := range steps {
				if err := v.Rename(s.from, s.to); err != nil {
					t.Fatalf("rename %q -> %q: %v", s.from, s.to, err)
				}
				checkCleanWhileOpen(t, v, img)
			}
			closeVolume(t, v)
			checkClean(t, img)
			got := readTree(t, os.DirFS(func() string {
				out := filepath.Join(t.TempDir(), "out")
				mtools(t, img, "mcopy", "-s", "-n", "::/", out)
				return out
			}()))
			tr := newTree()
			tr.addFile("x/back/file.txt", []byte("moved around\n"))
			tr.addDir(want)
			tr.addDir("y")
			requireSameTree(t, "mtools after moving directories", tr, got)
		})
	}
}

// TestRmdirNonEmpty: Remove refuses a directory with entries, ENOTEMPTY, and takes it once empty.
func TestRmdirNonEmpty(t *testing.T) {
	img := makeImage(t, fat32)
	v := openVolume(t, img)
	for _, d := range []string{"d", "d/sub"} {
		if err := v.Mkdir(d); err != nil {
			t.Fatal(err)
		}
	}
	writeVolumeFile(t, v, "d/file", []byte("x"))
	wantErrno(t, "remove a directory holding a file and a directory", v.Remove("d"), syscall.ENOTEMPTY)
	if err := v.Remove("d/file"); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "remove a directory holding a directory", v.Remove("d"), syscall.ENOTEMPTY)
	if err := v.Remove("d/sub"); err != nil {
		t.Fatal(err)
	}
	if err := v.Remove("D"); err != nil {
		t.Fatalf("remove an emptied directory (deleted entries left in it): %v", err)
	}
	closeVolume(t, v)
	checkClean(t, img)
}

// TestInvalidNames: characters no FAT long name may hold are EINVAL, for create, mkdir and
// rename alike, and nothing is created.
func TestInvalidNames(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	writeVolumeFile(t, v, "ok", []byte("ok"))
	bad := []string{"\x00", "*", "?", "\"", "<", ">", "|", ":", "\\"}
	for c := 1; c < 0x20; c++ {
		bad = append(bad, string(rune(c)))
	}
	for _, c := range bad {
		name := "bad" + c + "name"
		_, err := v.Create(name)
		wantErrno(t, fmt.Sprintf("create %q", name), err, syscall.EINVAL)
		wantErrno(t, fmt.Sprintf("mkdir %q", name), v.Mkdir(name), syscall.EINVAL)
		wantErrno(t, fmt.Sprintf("rename to %q", name), v.Rename("ok", name), syscall.EINVAL)
	}
	// Linux refuses a trailing space (Windows would strip it).
	_, err := v.Create("trailing space ")
	wantErrno(t, "create a name with a trailing space", err, syscall.EINVAL)
	// A slash separates path elements: this is a file in a directory that does not exist.
	_, err = v.Create("no such dir/b")
	wantErrno(t, "create under a missing directory", err, syscall.ENOENT)
	ents, err := v.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "ok" {
		t.Fatalf("root lists %v, want only ok", ents)
	}
	closeVolume(t, v)
	checkClean(t, img)
}

// TestNameTooLong: a long name holds 255 UTF-16 units; one more is ENAMETOOLONG. Characters
// outside the BMP count two units each.
func TestNameTooLong(t *testing.T) {
	img := makeImage(t, fat32)
	v := openVolume(t, img)
	ok := []string{strings.Repeat("n", 255), strings.Repeat("😀", 127) + "a"}
	tooLong := []string{strings.Repeat("n", 256), strings.Repeat("😀", 128), strings.Repeat("😀", 127) + "ab"}
	for _, name := range ok {
		if utf16Units(name) != 255 {
			t.Fatalf("test setup: %d units", utf16Units(name))
		}
		writeVolumeFile(t, v, name, []byte("255"))
	}
	writeVolumeFile(t, v, "short", nil)
	for _, name := range tooLong {
		if utf16Units(name) != 256 {
			t.Fatalf("test setup: %d units", utf16Units(name))
		}
		_, err := v.Create(name)
		wantErrno(t, "create a 256-unit name", err, syscall.ENAMETOOLONG)
		wantErrno(t, "mkdir a 256-unit name", v.Mkdir(name), syscall.ENAMETOOLONG)
		wantErrno(t, "rename to a 256-unit name", v.Rename("short", name), syscall.ENAMETOOLONG)
	}
	closeVolume(t, v)
	checkClean(t, img)
	out := filepath.Join(t.TempDir(), "out")
	mtools(t, img, "mcopy", "-s", "-n", "::/", out)
	if _, err := os.Stat(filepath.Join(out, ok[0])); err != nil {
		t.Fatalf("mtools does not see the 255-character name: %v", err)
	}
}

// TestTrailingDots: trailing dots are dropped from names as Linux does, in creation and lookup.
func TestTrailingDots(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	writeVolumeFile(t, v, "file...", []byte("dots"))
	if err := v.Mkdir("dir."); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"file", "file.", "FILE..", "dir", "dir..."} {
		if _, err := v.Stat(name); err != nil {
			t.Errorf("stat %q: %v", name, err)
		}
	}
	_, err := v.OpenFile("file.", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	wantErrno(t, "exclusive create of file. when file exists", err, syscall.EEXIST)
	ents, _ := v.ReadDir(".")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "dir,file" {
		t.Fatalf("root lists %q, want dir and file", names)
	}
	closeVolume(t, v)
	checkClean(t, img)
	out := filepath.Join(t.TempDir(), "out")
	mtools(t, img, "mcopy", "-s", "-n", "::/", out)
	want := newTree()
	want.addFile("file", []byte("dots"))
	want.addDir("dir")
	requireSameTree(t, "mtools after trailing dots", want, readTree(t, os.DirFS(out)))
}

// TestCaseInsensitiveNames: ASCII letters match in any case, so a second spelling of a name is
// the same entry; the short name mtools shows finds the entry too.
func TestCaseInsensitiveNames(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	writeVolumeFile(t, v, "abc", []byte("lower"))
	_, err := v.OpenFile("ABC", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	wantErrno(t, "exclusive create of ABC when abc exists", err, syscall.EEXIST)
	wantErrno(t, "mkdir ABC when abc exists", v.Mkdir("ABC"), syscall.EEXIST)
	if got := readVolumeFile(t, v, "AbC"); string(got) != "lower" {
		t.Fatalf("AbC reads %q", got)
	}
	writeVolumeFile(t, v, "ABC", []byte("replaced through ABC"))
	writeVolumeFile(t, v, "Long File Name.txt", []byte("long"))
	// FAT folds ASCII only (Linux's default iocharset): these long names are two names. (Names
	// that fit 8.3 would clash in their upper-cased short name, EEXIST as on Linux.)
	writeVolumeFile(t, v, "Grüße ä long name.txt", []byte("small"))
	f, err := v.OpenFile("GRüßE Ä long name.txt", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatalf("create GRüßE Ä long name.txt next to Grüße ä long name.txt: %v", err)
	}
	f.Close()
	ents, _ := v.ReadDir(".")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := "GRüßE Ä long name.txt,Grüße ä long name.txt,Long File Name.txt,abc"; strings.Join(names, ",") != want {
		t.Fatalf("root lists %q, want %q", strings.Join(names, ","), want)
	}
	closeVolume(t, v)
	checkClean(t, img)

	// The short name comes from mtools' listing, so it is not the engine's word.
	var short string
	for _, line := range strings.Split(mtools(t, img, "mdir", "-a", "::/"), "\n") {
		if strings.HasSuffix(line, " Long File Name.txt") {
			fields := strings.Fields(line)
			short = fields[0] + "." + fields[1]
		}
	}
	if short == "" {
		t.Fatal("mdir does not list Long File Name.txt")
	}
	v = openVolumeWith(t, img, readOnlyOptions)
	if got := readVolumeFile(t, v, strings.ToLower(short)); string(got) != "long" {
		t.Fatalf("the short name %q reads %q", short, got)
	}
	if got := readVolumeFile(t, v, "abc"); string(got) != "replaced through ABC" {
		t.Fatalf("abc reads %q", got)
	}
}

// TestDirtyBit: the boot sector's dirty bit is set while the volume is open for writing and
// cleared by Close; a read-only open leaves it alone.
func TestDirtyBit(t *testing.T) {
	for _, spec := range []volumeSpec{fat12, fat16, fat32} {
		t.Run(spec.name, func(t *testing.T) {
			img := makeImage(t, spec)
			v := openVolumeWith(t, img, readOnlyOptions)
			off := bootStateOffset(v.Geometry().Type)
			if b := readImageByte(t, img, off); b&1 != 0 {
				t.Fatalf("mkfs.fat left state byte %#x", b)
			}
			closeVolume(t, v)
			v = openVolume(t, img)
			if b := readImageByte(t, img, off); b&1 == 0 {
				t.Fatalf("state byte %#x while open for writing, want the dirty bit", b)
			}
			writeVolumeFile(t, v, "f", []byte("x"))
			closeVolume(t, v)
			if b := readImageByte(t, img, off); b&1 != 0 {
				t.Fatalf("state byte %#x after Close, want the dirty bit clear", b)
			}
			checkClean(t, img)
			sum := imageSum(t, img)
			v = openVolumeWith(t, img, readOnlyOptions)
			if b := readImageByte(t, img, off); b&1 != 0 {
				t.Fatalf("state byte %#x while open read-only", b)
			}
			closeVolume(t, v)
			if imageSum(t, img) != sum {
				t.Fatal("a read-only open and close changed the image")
			}
		})
	}
}

// TestFSInfoFreeCount: FAT32's FSINFO free count matches what fsck.fat counts, right after
// operations (on a synced snapshot) and after Close.
func TestFSInfoFreeCount(t *testing.T) {
	img := makeImage(t, fat32)
	v := openVolume(t, img)
	cs := clusterSize(t, v)
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20; i++ {
		writeVolumeFile(t, v, fmt.Sprintf("f%d", i), randomBytes(r, r.IntN(20*cs)))
	}
	if err := v.Mkdir("d"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i += 3 {
		if err := v.Remove(fmt.Sprintf("f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Truncate("f1", int64(cs/2)); err != nil {
		t.Fatal(err)
	}
	if err := v.Truncate("f2", int64(30*cs)); err != nil {
		t.Fatal(err)
	}
	snap := checkCleanWhileOpen(t, v, img)
	requireFSInfoFree(t, snap)
	closeVolume(t, v)
	checkClean(t, img)
	requireFSInfoFree(t, img)
}

// requireFSInfoFree reads FSINFO's free count (the boot sector names its sector at byte 48; the
// count is at byte 488) and compares it with fsck.fat's own count.
func requireFSInfoFree(t testing.TB, img string) {
	t.Helper()
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	sectorSize := int(binary.LittleEndian.Uint16(data[11:]))
	fsinfo := int(binary.LittleEndian.Uint16(data[48:])) * sectorSize
	free := binary.LittleEndian.Uint32(data[fsinfo+488:])
	used, total := usedClusters(t, img)
	if int(free) != total-used {
		t.Fatalf("FSINFO says %d clusters free, fsck.fat counts %d", free, total-used)
	}
}

// TestTimestamps: modification times have FAT's 2-second resolution as mtools reads them, and
// the creation time keeps its 10 ms field.
func TestTimestamps(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolumeWith(t, img, fatvol.Options{Location: time.UTC})
	// Create at an odd second plus about half a second, where a 2-second creation time would be
	// more than a second early.
	for now := time.Now(); now.Second()%2 != 1 || now.Nanosecond() < 300e6 || now.Nanosecond() > 700e6; now = time.Now() {
		time.Sleep(10 * time.Millisecond)
	}
	before := time.Now()
	writeVolumeFile(t, v, "T.TXT", []byte("time"))
	after := time.Now()
	mtime := time.Date(2021, 3, 4, 5, 6, 7, 500e6, time.UTC)
	if err := v.Chtimes("T.TXT", time.Time{}, mtime); err != nil {
		t.Fatal(err)
	}
	fi, err := v.Stat("T.TXT")
	if err != nil {
		t.Fatal(err)
	}
	pos := fi.Sys().(*fatvol.Attr).Pos
	closeVolume(t, v)
	checkClean(t, img)

	out := filepath.Join(t.TempDir(), "t.txt")
	mtools(t, img, "mcopy", "-m", "-n", "::/T.TXT", out)
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2021, 3, 4, 5, 6, 6, 0, time.UTC); !st.ModTime().Equal(want) {
		t.Fatalf("mtools gives mtime %v, want %v", st.ModTime().UTC(), want)
	}

	// The creation time, decoded here from the raw entry (bytes 13-17).
	raw := make([]byte, 32)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(raw, pos); err != nil {
		t.Fatal(err)
	}
	if string(raw[:11]) != "T       TXT" {
		t.Fatalf("the entry at %d is %q, not T.TXT", pos, raw[:11])
	}
	tenth, tm, date := int(raw[13]), int(binary.LittleEndian.Uint16(raw[14:])), int(binary.LittleEndian.Uint16(raw[16:]))
	created := time.Date(1980+date>>9, time.Month(date>>5&15), date&31, tm>>11, tm>>5&63, (tm&31)*2, 0, time.UTC).
		Add(time.Duration(tenth) * 10 * time.Millisecond)
	if tenth > 199 || created.Before(before.Truncate(10*time.Millisecond)) || created.After(after) {
		t.Fatalf("creation time %v (10 ms field %d), want within [%v, %v]", created, tenth, before.UTC(), after.UTC())
	}
}

// TestReadOnlyVolume: every change is EROFS and the image stays byte for byte the same.
func TestReadOnlyVolume(t *testing.T) {
	img := makeImage(t, fat32)
	v := openVolume(t, img)
	writeVolumeFile(t, v, "file", []byte("content"))
	if err := v.Mkdir("dir"); err != nil {
		t.Fatal(err)
	}
	closeVolume(t, v)
	sum := imageSum(t, img)

	v = openVolumeWith(t, img, readOnlyOptions)
	_, err := v.Create("new")
	wantErrno(t, "create", err, syscall.EROFS)
	_, err = v.OpenFile("file", os.O_WRONLY, 0)
	wantErrno(t, "open for writing", err, syscall.EROFS)
	_, err = v.OpenFile("file", os.O_RDONLY|os.O_TRUNC, 0)
	wantErrno(t, "open with O_TRUNC", err, syscall.EROFS)
	wantErrno(t, "mkdir", v.Mkdir("d2"), syscall.EROFS)
	wantErrno(t, "remove", v.Remove("file"), syscall.EROFS)
	wantErrno(t, "rename", v.Rename("file", "other"), syscall.EROFS)
	wantErrno(t, "truncate", v.Truncate("file", 0), syscall.EROFS)
	wantErrno(t, "chtimes", v.Chtimes("file", time.Now(), time.Now()), syscall.EROFS)
	wantErrno(t, "chattr", v.SetAttributes("file", ondisk.AttrHidden), syscall.EROFS)
	f, err := v.Open("file")
	if err != nil {
		t.Fatal(err)
	}
	ff := f.(*fatvol.File)
	_, err = ff.Write([]byte("x"))
	wantErrno(t, "write to a file opened read-only", err, syscall.EBADF)
	if err := ff.Truncate(0); err == nil {
		t.Fatal("truncate through a read-only handle succeeded")
	}
	if got, _ := io.ReadAll(ff); string(got) != "content" {
		t.Fatalf("read %q", got)
	}
	ff.Close()
	if err := v.Sync(); err != nil {
		t.Fatalf("sync of a read-only volume: %v", err)
	}
	closeVolume(t, v)
	if imageSum(t, img) != sum {
		t.Fatal("the read-only volume's image changed")
	}
}

// TestConcurrentOps runs many goroutines on their own files and directories at once (run with
// -race), then checks the volume with fsck.fat and its content with mtools.
func TestConcurrentOps(t *testing.T) {
	img := makeImage(t, fat32)
	v := openVolume(t, img)
	cs := clusterSize(t, v)
	const workers = 8
	iters := 100
	if testing.Short() {
		iters = 10
	}
	results := make([]*tree, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 99))
			tr := newTree()
			results[w] = tr
			dir := fmt.Sprintf("worker %d", w)
			fail := func(format string, args ...any) { t.Errorf("worker %d: "+format, append([]any{w}, args...)...) }
			for _, d := range []string{dir, dir + "/a", dir + "/b"} {
				if err := v.Mkdir(d); err != nil {
					fail("mkdir %q: %v", d, err)
					return
				}
			}
			where := "a"
			if err := v.Mkdir(dir + "/a/moving"); err != nil {
				fail("mkdir: %v", err)
				return
			}
			for i := 0; i < iters; i++ {
				name := fmt.Sprintf("%s/file %d with a long name.bin", dir, i%7)
				data := randomBytes(r, r.IntN(6*cs))
				f, err := v.Create(name)
				if err != nil {
					fail("create %q: %v", name, err)
					return
				}
				if _, err := f.Write(data); err != nil {
					fail("write %q: %v", name, err)
				}
				got := make([]byte, len(data))
				if _, err := f.ReadAt(got, 0); err != nil && err != io.EOF || !bytes.Equal(got, data) {
					fail("read back %q: %v %s", name, err, describeDiff(data, got))
				}
				f.Close()
				tr.files[name] = data
				switch i % 4 {
				case 1:
					if err := v.Remove(name); err != nil {
						fail("remove %q: %v", name, err)
					}
					delete(tr.files, name)
				case 2:
					size := int64(r.IntN(3 * cs))
					if err := v.Truncate(name, size); err != nil {
						fail("truncate %q: %v", name, err)
					}
					tr.files[name] = truncateModel(data, size)
				case 3:
					other := map[string]string{"a": "b", "b": "a"}[where]
					if err := v.Rename(dir+"/"+where+"/moving", dir+"/"+other+"/moving"); err != nil {
						fail("rename: %v", err)
					}
					where = other
				}
				if _, err := v.ReadDir("."); err != nil {
					fail("readdir: %v", err)
				}
				if _, err := v.StatFS(); err != nil {
					fail("statfs: %v", err)
				}
			}
			tr.addDir(dir + "/a")
			tr.addDir(dir + "/b")
			tr.addDir(dir + "/" + where + "/moving")
		}()
	}
	wg.Wait()
	closeVolume(t, v)
	checkClean(t, img)
	want := newTree()
	for _, tr := range results {
		for p, d := range tr.files {
			want.addFile(p, d)
		}
		for d := range tr.dirs {
			want.addDir(d)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	mtools(t, img, "mcopy", "-s", "-n", "::/", out)
	requireSameTree(t, "mtools after concurrent operations", want, readTree(t, os.DirFS(out)))
}

// TestSparseWriteOverOldData: gaps that writes past the end, truncates up and fallocate create
// read back as zeros, on disk too, even where the clusters held another file's data.
func TestSparseWriteOverOldData(t *testing.T) {
	img := makeImage(t, fat12Small)
	v := openVolume(t, img)
	cs := clusterSize(t, v)
	// Fill every free cluster with 0xAA, then free them all: whatever the new file gets is stale.
	f, err := v.Create("old")
	if err != nil {
		t.Fatal(err)
	}
	stale := bytes.Repeat([]byte{0xAA}, cs)
	for {
		if _, err := f.Write(stale); err != nil {
			wantErrno(t, "fill", err, syscall.ENOSPC)
			break
		}
	}
	f.Close()
	if err := v.Remove("old"); err != nil {
		t.Fatal(err)
	}

	f, err = v.Create("new")
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	write := func(p []byte, off int64) {
		t.Helper()
		if _, err := f.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		want = writeModel(want, p, off)
	}
	write([]byte("head"), 0)
	write([]byte{1}, int64(5*cs+3)) // a gap over several clusters
	if err := f.Truncate(int64(8*cs + 100)); err != nil {
		t.Fatal(err)
	}
	want = truncateModel(want, int64(8*cs+100))
	if err := f.Fallocate(int64(8*cs+100), int64(2*cs), false); err != nil {
		t.Fatal(err)
	}
	want = truncateModel(want, int64(10*cs+100))
	write(bytes.Repeat([]byte{7}, 50), int64(10*cs+100))
	// Shrink inside a cluster, then grow again: the cut bytes must not come back.
	if err := f.Truncate(int64(10*cs + 110)); err != nil {
		t.Fatal(err)
	}
	want = truncateModel(want, int64(10*cs+110))
	if err := f.Truncate(int64(11 * cs)); err != nil {
		t.Fatal(err)
	}
	want = truncateModel(want, int64(11*cs))
	// Preallocate past the end keeping the size, then write beyond: the gap is zeros too.
	if err := f.Fallocate(int64(11*cs), int64(3*cs), true); err != nil {
		t.Fatal(err)
	}
	write([]byte("tail"), int64(13*cs+5))
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("engine reads %v %s", err, describeDiff(want, got))
	}
	f.Close()
	closeVolume(t, v)
	checkClean(t, img)
	out := filepath.Join(t.TempDir(), "new")
	mtools(t, img, "mcopy", "-n", "::/new", out)
	if disk, _ := os.ReadFile(out); !bytes.Equal(disk, want) {
		t.Fatalf("mtools reads %s", describeDiff(want, disk))
	}
}

// TestFallocate: allocation that grows the file reads as zeros and counts in StatFS and on disk.
func TestFallocate(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	cs := clusterSize(t, v)
	free := freeClusters(t, v)
	f, err := v.Create("grown")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(0, int64(10*cs+1), false); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != int64(10*cs+1) {
		t.Fatalf("size %d after fallocate, want %d", st.Size(), 10*cs+1)
	}
	if got := freeClusters(t, v); got != free-11 {
		t.Fatalf("%d clusters free after fallocating 11, was %d", got, free)
	}
	wantErrno(t, "fallocate of length 0", f.Fallocate(0, 0, false), syscall.EINVAL)
	f.Close()
	closeVolume(t, v)
	checkClean(t, img)
	out := filepath.Join(t.TempDir(), "grown")
	mtools(t, img, "mcopy", "-n", "::/grown", out)
	if disk, _ := os.ReadFile(out); !bytes.Equal(disk, make([]byte, 10*cs+1)) {
		t.Fatalf("mtools reads %d bytes, not %d zeros", len(disk), 10*cs+1)
	}
}

// TestFallocateKeepSize: clusters preallocated past the end hold space while the file is open
// and keep its size; at the last close they are released, as Linux does (fat_free_eofblocks), so
// that no file's chain is longer than its size on disk.
func TestFallocateKeepSize(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	cs := clusterSize(t, v)
	writeVolumeFile(t, v, "kept", []byte("100 bytes or so"))
	free := freeClusters(t, v)
	f, err := v.OpenFile("kept", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(0, int64(20*cs), true); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != int64(len("100 bytes or so")) {
		t.Fatalf("keep-size fallocate changed the size to %d", st.Size())
	}
	if got := freeClusters(t, v); got != free-19 {
		t.Fatalf("%d clusters free after preallocating 19 more, was %d", got, free)
	}
	f.Close()
	if got := readVolumeFile(t, v, "kept"); string(got) != "100 bytes or so" {
		t.Fatalf("reads %q", got)
	}
	closeVolume(t, v)
	checkClean(t, img)
}

// TestDirectoryEntryLimit: a directory holds at most 65,536 entries: '.', '..', the long-name
// entries and the short entries. Creating past that is ENOSPC; other directories are unaffected.
func TestDirectoryEntryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 65,000 files")
	}
	img := makeImage(t, volumeSpec{"FAT32-512B-clusters", 64 << 20, []string{"-F", "32", "-s", "1"}})
	v := openVolume(t, img)
	if err := v.Mkdir("big"); err != nil {
		t.Fatal(err)
	}
	used := 2 // '.' and '..'
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("A long name number %d %s.txt", i, strings.Repeat("z", i*5))
		writeVolumeFile(t, v, "big/"+name, nil)
		used += lfnSlots(name) + 1
	}
	n := 0
	for ; ; n++ {
		// Eight upper-case hex digits: a short name alone, one entry.
		f, err := v.OpenFile(fmt.Sprintf("big/%08X", n), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			wantErrno(t, "create past the entry limit", err, syscall.ENOSPC)
			break
		}
		f.Close()
		if n > 70000 {
			t.Fatal("no limit")
		}
	}
	if want := 65536 - used; n != want {
		t.Fatalf("created %d short entries, want 65536 - %d = %d", n, used, want)
	}
	wantErrno(t, "mkdir in a full directory", v.Mkdir("big/DIR"), syscall.ENOSPC)
	writeVolumeFile(t, v, "elsewhere", []byte("other directories still grow"))
	if err := v.Remove("big/00000000"); err != nil {
		t.Fatal(err)
	}
	writeVolumeFile(t, v, "big/NEW", nil)
	closeVolume(t, v)
	checkClean(t, img)
}

// TestRemovedShortNameIsGone: after a file is removed, its short name no longer finds anything,
// and the name can be created again.
func TestRemovedShortNameIsGone(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	cs := clusterSize(t, v)
	writeVolumeFile(t, v, "DATA.BIN", bytes.Repeat([]byte{1}, 3*cs))
	writeVolumeFile(t, v, "c.d", []byte("lower-case 8.3"))
	for _, name := range []string{"DATA.BIN", "c.d"} {
		if err := v.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"DATA.BIN", "data.bin", "C.D", "c.d"} {
		_, err := v.Stat(name)
		wantErrno(t, "stat removed "+name, err, syscall.ENOENT)
		_, err = v.Open(name)
		wantErrno(t, "open removed "+name, err, syscall.ENOENT)
	}
	if err := v.Mkdir("C.D"); err != nil {
		t.Fatalf("mkdir C.D after removing c.d: %v", err)
	}
	f, err := v.OpenFile("DATA.BIN", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatalf("exclusive create of DATA.BIN after removing it: %v", err)
	}
	f.Close()
	closeVolume(t, v)
	checkClean(t, img)
}

// TestInsertOverDeletedEntriesAtTheEnd: a name whose entries start in deleted entries at the end
// of the used part of a directory and run into the free tail; the entries created after it must
// not overwrite it.
func TestInsertOverDeletedEntriesAtTheEnd(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	if err := v.Mkdir("d"); err != nil {
		t.Fatal(err)
	}
	writeVolumeFile(t, v, "d/A", []byte("a")) // one entry, the last one used
	if err := v.Remove("d/A"); err != nil {
		t.Fatal(err)
	}
	writeVolumeFile(t, v, "d/a longer name.txt", []byte("long")) // three entries from the deleted one
	writeVolumeFile(t, v, "d/B", []byte("b"))
	writeVolumeFile(t, v, "d/another long name.txt", []byte("another"))
	check := func(when string) {
		t.Helper()
		want := map[string]string{"a longer name.txt": "long", "B": "b", "another long name.txt": "another"}
		ents, err := v.ReadDir("d")
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != len(want) {
			t.Errorf("%s: d lists %v", when, ents)
		}
		for name, content := range want {
			if got := readVolumeFile(t, v, "d/"+name); string(got) != content {
				t.Errorf("%s: %q reads %q", when, name, got)
			}
		}
	}
	check("before reopening")
	closeVolume(t, v)
	checkClean(t, img)
	v = openVolume(t, img)
	check("after reopening")
}

// TestRenameErrnoOrder pins two errno choices where Linux's order of checks decides.
func TestRenameErrnoOrder(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	if err := v.Mkdir("d"); err != nil {
		t.Fatal(err)
	}
	writeVolumeFile(t, v, "d/f", []byte("f"))
	writeVolumeFile(t, v, "file", []byte("file"))
	t.Run("onto an ancestor of the source", func(t *testing.T) {
		// rename(2): "target should not be an ancestor of source" comes before the type checks.
		wantErrno(t, "rename d/f -> d", v.Rename("d/f", "d"), syscall.ENOTEMPTY)
	})
	t.Run("missing source, target under a file", func(t *testing.T) {
		// rename(2) resolves both parents before it looks the source up.
		wantErrno(t, "rename missing -> file/x", v.Rename("missing", "file/x"), syscall.ENOTDIR)
	})
	closeVolume(t, v)
	checkClean(t, img)
}
