package fatfuse

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// workload runs a mix of what programs do to files and directories under root and returns the
// outcome of every step (errno, sizes, contents, link counts), so that the same workload on
// tmpfs and on a FAT mount can be compared line by line. It avoids what FAT does differently on
// purpose (case, permission bits other than write, symlinks, names FAT refuses, time
// resolution); those have their own tests.
func workload(t *testing.T, root string) []string {
	t.Helper()
	var log []string
	rec := func(step string, err error) { log = append(log, step+": "+errnoOf(err)) }
	note := func(format string, args ...any) { log = append(log, fmt.Sprintf(format, args...)) }
	p := func(name string) string { return filepath.Join(root, name) }
	size := func(name string) {
		fi, err := os.Stat(p(name))
		if err != nil {
			rec("stat "+name, err)
			return
		}
		note("size %s = %d", name, fi.Size())
	}
	content := func(name string) {
		b, err := os.ReadFile(p(name))
		if err != nil {
			rec("read "+name, err)
			return
		}
		note("content %s = %x", name, sha256.Sum256(b))
	}

	// Create, write, append, read.
	rec("write a.txt", os.WriteFile(p("a.txt"), []byte("hello\n"), 0o644))
	f, err := os.OpenFile(p("a.txt"), os.O_WRONLY|os.O_APPEND, 0)
	rec("open append", err)
	if err == nil {
		_, err = f.Write([]byte("world\n"))
		rec("append", err)
		// Linux appends even a pwrite on an O_APPEND descriptor.
		_, err = unix.Pwrite(int(f.Fd()), []byte("x"), 0)
		rec("pwrite on O_APPEND", err)
		rec("close", f.Close())
	}
	content("a.txt")
	_, err = os.OpenFile(p("a.txt"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	rec("O_EXCL on existing", err)
	f, err = os.OpenFile(p("a.txt"), os.O_RDONLY, 0)
	if err == nil {
		_, err = f.Write([]byte("no"))
		rec("write on O_RDONLY", err)
		f.Close()
	}

	// A large file written in pieces, with a hole past the end.
	rnd := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 3<<20+12345)
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	f, err = os.Create(p("big.bin"))
	rec("create big.bin", err)
	if err == nil {
		for off := 0; off < len(big); off += 1<<20 - 7 {
			_, err = f.WriteAt(big[off:min(off+1<<20-7, len(big))], int64(off))
			if err != nil {
				break
			}
		}
		rec("write big.bin", err)
		_, err = f.WriteAt([]byte("tail"), int64(len(big))+100000)
		rec("write past end", err)
		rec("fsync big.bin", f.Sync())
		rec("close big.bin", f.Close())
	}
	size("big.bin")
	content("big.bin")

	// Truncation: O_TRUNC, shrink, grow (zero-filled), ftruncate.
	rec("write t.bin", os.WriteFile(p("t.bin"), bytes.Repeat([]byte("t"), 10000), 0o644))
	rec("truncate shrink", os.Truncate(p("t.bin"), 1234))
	rec("truncate grow", os.Truncate(p("t.bin"), 70000))
	size("t.bin")
	content("t.bin")
	f, err = os.OpenFile(p("t.bin"), os.O_RDWR|os.O_TRUNC, 0)
	rec("open O_TRUNC", err)
	if err == nil {
		size("t.bin")
		_, err = f.Write([]byte("after trunc"))
		rec("write after O_TRUNC", err)
		rec("ftruncate", f.Truncate(5))
		f.Close()
	}
	content("t.bin")

	// fallocate: mode 0 grows the file, KEEP_SIZE does not.
	f, err = os.OpenFile(p("alloc.bin"), os.O_RDWR|os.O_CREATE, 0o644)
	rec("create alloc.bin", err)
	if err == nil {
		rec("fallocate 0", unix.Fallocate(int(f.Fd()), 0, 0, 100000))
		rec("fallocate keep size", unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 100000, 300000))
		f.Close()
	}
	size("alloc.bin")
	content("alloc.bin")

	// Directories.
	rec("mkdir d", os.Mkdir(p("d"), 0o755))
	rec("mkdir d again", os.Mkdir(p("d"), 0o755))
	rec("mkdir d/e", os.Mkdir(p("d/e"), 0o755))
	rec("mkdir d/f", os.Mkdir(p("d/f"), 0o755))
	rec("mkdir missing/x", os.Mkdir(p("missing/x"), 0o755))
	rec("write d/e/in.txt", os.WriteFile(p("d/e/in.txt"), []byte("inside"), 0o644))
	rec("rmdir non-empty", unix.Rmdir(p("d/e")))
	rec("rmdir file", unix.Rmdir(p("a.txt")))
	rec("unlink dir", unix.Unlink(p("d/f")))
	rec("rmdir d/f", unix.Rmdir(p("d/f")))
	rec("mkdir d/g", os.Mkdir(p("d/g"), 0o755))
	for _, dir := range []string{".", "d", "d/e"} {
		var st unix.Stat_t
		rec("stat "+dir, unix.Stat(p(dir), &st))
		note("nlink %s = %d", dir, st.Nlink)
	}
	rec("open dir for writing", func() error { _, err := os.OpenFile(p("d"), os.O_WRONLY, 0); return err }())
	rec("create under a file", os.WriteFile(p("a.txt/x"), nil, 0o644))

	// Renames, plain and with renameat2 flags.
	rec("write r1", os.WriteFile(p("r1"), []byte("one"), 0o644))
	rec("write r2", os.WriteFile(p("r2"), []byte("two"), 0o644))
	rec("rename over file", unix.Rename(p("r1"), p("r2")))
	content("r2")
	rec("stat r1 after rename", statErr(p("r1")))
	rec("rename into dir", unix.Rename(p("r2"), p("d/e/r2")))
	rec("rename dir into itself", unix.Rename(p("d"), p("d/e/sub")))
	rec("rename file over dir", unix.Rename(p("d/e/r2"), p("d/g")))
	rec("rename dir over file", unix.Rename(p("d/g"), p("a.txt")))
	rec("mkdir d2", os.Mkdir(p("d2"), 0o755))
	rec("write d2/x", os.WriteFile(p("d2/x"), []byte("x"), 0o644))
	rec("rename dir over non-empty dir", unix.Rename(p("d/g"), p("d2")))
	rec("rename dir over empty dir", unix.Rename(p("d2"), p("d/g")))
	rec("rename missing", unix.Rename(p("nope"), p("nope2")))
	rec("noreplace existing", unix.Renameat2(unix.AT_FDCWD, p("a.txt"), unix.AT_FDCWD, p("t.bin"), unix.RENAME_NOREPLACE))
	rec("noreplace new", unix.Renameat2(unix.AT_FDCWD, p("t.bin"), unix.AT_FDCWD, p("t2.bin"), unix.RENAME_NOREPLACE))
	rec("exchange files", unix.Renameat2(unix.AT_FDCWD, p("a.txt"), unix.AT_FDCWD, p("d/e/r2"), unix.RENAME_EXCHANGE))
	content("a.txt")
	content("d/e/r2")
	rec("exchange file and dir", unix.Renameat2(unix.AT_FDCWD, p("t2.bin"), unix.AT_FDCWD, p("d/g"), unix.RENAME_EXCHANGE))
	rec("stat t2.bin is dir", func() error {
		fi, err := os.Stat(p("t2.bin"))
		if err == nil && !fi.IsDir() {
			return fmt.Errorf("t2.bin is not a directory after the exchange")
		}
		return err
	}())
	content("d/g")
	rec("exchange with missing", unix.Renameat2(unix.AT_FDCWD, p("a.txt"), unix.AT_FDCWD, p("none"), unix.RENAME_EXCHANGE))

	// A file removed while open stays usable through its descriptor.
	f, err = os.OpenFile(p("gone.txt"), os.O_RDWR|os.O_CREATE, 0o644)
	rec("create gone.txt", err)
	if err == nil {
		_, err = f.Write([]byte("still here"))
		rec("write gone.txt", err)
		rec("unlink open file", os.Remove(p("gone.txt")))
		rec("stat unlinked", statErr(p("gone.txt")))
		var st unix.Stat_t
		rec("fstat unlinked", unix.Fstat(int(f.Fd()), &st))
		note("unlinked: nlink %d size %d", st.Nlink, st.Size)
		_, err = f.WriteAt([]byte(" and more"), 10)
		rec("write unlinked", err)
		rec("ftruncate unlinked", f.Truncate(15))
		b := make([]byte, 100)
		n, _ := f.ReadAt(b, 0)
		note("unlinked reads %q", b[:n])
		rec("close unlinked", f.Close())
	}
	rec("recreate gone.txt", os.WriteFile(p("gone.txt"), []byte("new"), 0o644))
	content("gone.txt")

	// Removing the write bits (FAT: the read-only attribute) and giving them back.
	rec("chmod a-w", os.Chmod(p("a.txt"), 0o555))
	note("a.txt writable by owner: %v", modeOf(p("a.txt"))&0o200 != 0)
	rec("chmod u+w", os.Chmod(p("a.txt"), 0o755))
	note("a.txt writable by owner: %v", modeOf(p("a.txt"))&0o200 != 0)

	// Times, at a resolution FAT keeps (even seconds).
	mt := time.Date(2011, 6, 7, 8, 9, 10, 0, time.Local)
	rec("chtimes file", os.Chtimes(p("a.txt"), mt, mt))
	rec("chtimes dir", os.Chtimes(p("d/e"), mt, mt.Add(2*time.Second)))
	for _, name := range []string{"a.txt", "d/e"} {
		fi, err := os.Stat(p(name))
		if err == nil {
			note("mtime %s = %s", name, fi.ModTime().Format(time.RFC3339Nano))
		}
	}

	// Names: 255 characters fit, 256 do not.
	long := strings.Repeat("n", 255)
	rec("255-character name", os.WriteFile(p(long), []byte("l"), 0o644))
	rec("256-character name", os.WriteFile(p(long+"n"), []byte("l"), 0o644))
	rec("stat 256-character name", statErr(p(long+"n")))
	rec("remove 255-character name", os.Remove(p(long)))

	// Many entries in one directory, then removed again.
	rec("mkdir many", os.Mkdir(p("many"), 0o755))
	for i := range 300 {
		if err := os.WriteFile(p(fmt.Sprintf("many/file-%03d.dat", i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			rec("write many", err)
			break
		}
	}
	entries, err := os.ReadDir(p("many"))
	rec("readdir many", err)
	note("many has %d entries", len(entries))
	for i := 0; i < 300; i += 2 {
		if err := os.Remove(p(fmt.Sprintf("many/file-%03d.dat", i))); err != nil {
			rec("remove many", err)
			break
		}
	}
	return append(log, snapshot(t, root)...)
}

func statErr(path string) error { _, err := os.Stat(path); return err }

func modeOf(path string) fs.FileMode {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Mode()
}

// snapshot lists the tree under root: every directory and every file with its size and digest,
// in name order.
func snapshot(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			out = append(out, "dir "+rel)
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("file %s %d %x", rel, len(b), sha256.Sum256(b)))
		return nil
	})
	if err != nil {
		t.Errorf("walk %s: %v", root, err)
	}
	return out
}

// TestWorkloadMatchesTmpfs runs the workload on a plain directory and on a FAT mount and wants
// the same outcomes; after unmounting, fsck.fat finds the volume clean and mtools reads the same
// files.
func TestWorkloadMatchesTmpfs(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy")
	for _, fat := range []string{"12", "16", "32"} {
		t.Run("FAT"+fat, func(t *testing.T) {
			size := map[string]int{"12": 16 << 10, "16": 64 << 10, "32": 300 << 10}[fat]
			img := makeImage(t, size, "-F", fat)
			ref := t.TempDir()
			want := workload(t, ref)
			m := mountImage(t, img, "")
			got := workload(t, m.dir)
			compareLines(t, want, got)
			m.unmount()
			fsckClean(t, img)
			compareWithMtools(t, img, ref)
		})
	}
}

func compareLines(t *testing.T, want, got []string) {
	t.Helper()
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("step %d:\n  tmpfs: %s\n  fat:   %s", i, w, g)
		}
	}
}

// compareWithMtools copies the whole volume out with mcopy and compares it with dir.
func compareWithMtools(t *testing.T, img, dir string) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("mcopy", "-s", "-n", "-i", img, "::*", out)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mcopy: %v\n%s", err, b)
	}
	compareLines(t, snapshot(t, dir), snapshot(t, out))
}
