package fatfuse

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// mtools runs an mtools command on img and returns its output.
func mtools(t *testing.T, tool string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool, args...)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, out)
	}
	return string(out)
}

func stat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st
}

// TestCaseInsensitiveNames checks FAT's names: any case finds the entry, which keeps the case it
// was created with.
func TestCaseInsensitiveNames(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mdir")
	img := makeImage(t, 8192)
	m := mountImage(t, img, "")
	if err := os.WriteFile(m.path("Foo.Txt"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := stat(t, m.path("Foo.Txt")), stat(t, m.path("fOO.tXT"))
	if a.Ino != b.Ino {
		t.Errorf("Foo.Txt is inode %d, fOO.tXT %d", a.Ino, b.Ino)
	}
	if got, err := os.ReadFile(m.path("FOO.TXT")); err != nil || string(got) != "content" {
		t.Errorf("read FOO.TXT = %q, %v", got, err)
	}
	_, err := os.OpenFile(m.path("foo.txt"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errnoOf(err) != syscall.EEXIST.Error() {
		t.Errorf("O_EXCL create of foo.txt: %v, want EEXIST", err)
	}
	if err := os.Mkdir(m.path("FOO.TXT"), 0o755); errnoOf(err) != syscall.EEXIST.Error() {
		t.Errorf("mkdir FOO.TXT: %v, want EEXIST", err)
	}
	entries, err := os.ReadDir(m.dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "Foo.Txt" {
		t.Errorf("readdir = %v, %v; want just Foo.Txt", entries, err)
	}
	// After a rename, the other spelling the kernel cached must stop resolving well before the
	// one-second entry timeout would drop it.
	if err := os.WriteFile(m.path("Moved"), []byte("m"), 0o644); err != nil {
		t.Fatal(err)
	}
	stat(t, m.path("mOVED"))
	if err := os.Rename(m.path("Moved"), m.path("Elsewhere")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for statErr := unix.Stat(m.path("mOVED"), new(unix.Stat_t)); statErr == nil; statErr = unix.Stat(m.path("mOVED"), new(unix.Stat_t)) {
		if time.Now().After(deadline) {
			t.Errorf("mOVED still resolves after Moved was renamed")
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.Remove(m.path("Elsewhere")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.path("foo.txt")); err != nil {
		t.Errorf("remove by another case: %v", err)
	}
	if err := os.WriteFile(m.path("Kept.Case"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m.unmount()
	fsckClean(t, img)
	if out := mtools(t, "mdir", "-i", img, "::"); !strings.Contains(out, "Kept.Case") || strings.Contains(out, "Foo.Txt") {
		t.Errorf("mdir after unmount:\n%s", out)
	}
}

// TestWhatFATCannotHold checks the refusals vfat gives: no symlinks, hard links, devices, FIFOs,
// whiteouts, hole punching or extended attributes, and names with characters FAT forbids.
func TestWhatFATCannotHold(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	img := makeImage(t, 8192)
	m := mountImage(t, img, "")
	if err := os.WriteFile(m.path("f"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(m.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tt := range []struct {
		what string
		err  error
		want syscall.Errno
	}{
		{"symlink", os.Symlink("f", m.path("s")), syscall.EPERM},
		{"link", os.Link(m.path("f"), m.path("l")), syscall.EPERM},
		{"mkfifo", unix.Mkfifo(m.path("fifo"), 0o644), syscall.EPERM},
		{"mknod char", unix.Mknod(m.path("c"), unix.S_IFCHR|0o644, 0), syscall.EPERM},
		{"whiteout", unix.Renameat2(unix.AT_FDCWD, m.path("f"), unix.AT_FDCWD, m.path("w"), unix.RENAME_WHITEOUT), syscall.EINVAL},
		{"punch hole", unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4), syscall.EOPNOTSUPP},
		{"zero range", unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE, 0, 4), syscall.EOPNOTSUPP},
		{"setxattr", unix.Setxattr(m.path("f"), "user.x", []byte("1"), 0), syscall.EOPNOTSUPP},
		{"name with colon", os.WriteFile(m.path("a:b"), nil, 0o644), syscall.EINVAL},
		{"name with star", os.Mkdir(m.path("a*b"), 0o755), syscall.EINVAL},
		{"rename to bad name", unix.Rename(m.path("f"), m.path("a?b")), syscall.EINVAL},
	} {
		if errnoOf(tt.err) != tt.want.Error() {
			t.Errorf("%s: %v, want %v", tt.what, tt.err, tt.want)
		}
	}
	// mknod of a regular file makes an empty file, as on vfat.
	if err := unix.Mknod(m.path("reg"), unix.S_IFREG|0o644, 0); err != nil {
		t.Errorf("mknod S_IFREG: %v", err)
	} else if st := stat(t, m.path("reg")); st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 {
		t.Errorf("mknod S_IFREG made mode %o size %d", st.Mode, st.Size)
	}
	f.Close()
	m.unmount()
	fsckClean(t, img)
}

// TestAttributes checks owner, modes, link counts, block counts and times against vfat's rules,
// and chmod/chown as vfat takes them.
func TestAttributes(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mattrib")
	// -s 4 with 512-byte sectors: 2048-byte clusters.
	img := makeImage(t, 16384, "-s", "4", "-S", "512")
	m := mountImage(t, img, "uid=1234,gid=5678,fmask=0133,dmask=0022")
	if err := os.WriteFile(m.path("file"), bytes.Repeat([]byte("x"), 5000), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"dir", "dir/a", "dir/b", "dir/c"} {
		if err := os.Mkdir(m.path(d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	fst, dst, rst := stat(t, m.path("file")), stat(t, m.path("dir")), stat(t, m.dir)
	if fst.Uid != 1234 || fst.Gid != 5678 || dst.Uid != 1234 || rst.Gid != 5678 {
		t.Errorf("owners: file %d:%d dir %d:%d root %d:%d", fst.Uid, fst.Gid, dst.Uid, dst.Gid, rst.Uid, rst.Gid)
	}
	if fst.Mode != unix.S_IFREG|0o644 {
		t.Errorf("file mode %o, want regular 0644 (0777 &^ fmask 0133)", fst.Mode)
	}
	if dst.Mode != unix.S_IFDIR|0o755 {
		t.Errorf("dir mode %o, want directory 0755 (0777 &^ dmask 0022; mkdir's mode has no say)", dst.Mode)
	}
	if fst.Nlink != 1 || dst.Nlink != 5 || rst.Nlink != 3 {
		t.Errorf("nlink: file %d (want 1), dir with 3 subdirectories %d (want 5), root with 1 %d (want 3)", fst.Nlink, dst.Nlink, rst.Nlink)
	}
	if fst.Blksize != 2048 || fst.Blocks != 3*2048/512 {
		t.Errorf("5000-byte file: blksize %d blocks %d, want 2048 and 12 (3 clusters)", fst.Blksize, fst.Blocks)
	}

	// Times: modification at 2-second resolution, access a date, change = modification.
	odd := time.Date(2019, 3, 4, 5, 6, 7, 0, time.Local)
	if err := os.Chtimes(m.path("file"), odd, odd); err != nil {
		t.Fatal(err)
	}
	st := stat(t, m.path("file"))
	mt := time.Unix(st.Mtim.Unix())
	if !mt.Equal(odd.Add(-time.Second)) {
		t.Errorf("mtime %v, want %v (FAT keeps even seconds)", mt, odd.Add(-time.Second))
	}
	if st.Ctim != st.Mtim {
		t.Errorf("ctime %v differs from mtime %v", st.Ctim, st.Mtim)
	}
	at := time.Unix(st.Atim.Unix()).In(time.Local)
	if y, mo, d := at.Date(); y != 2019 || mo != 3 || d != 4 || at.Hour() != 0 || at.Minute() != 0 {
		t.Errorf("atime %v, want 2019-03-04 at midnight (FAT keeps a date)", at)
	}

	// chmod: losing every write bit sets the read-only attribute, gaining one clears it; a mode
	// FAT cannot hold is ignored without error; bits beyond 0777 are refused.
	if err := os.Chmod(m.path("file"), 0o444); err != nil {
		t.Errorf("chmod 0444: %v", err)
	}
	if got := stat(t, m.path("file")).Mode & 0o777; got != 0o444 {
		t.Errorf("after chmod 0444: %o", got)
	}
	if err := os.Chmod(m.path("file"), 0o600); err != nil {
		t.Errorf("chmod 0600 (read bits FAT cannot drop): %v, vfat ignores it silently", err)
	}
	if got := stat(t, m.path("file")).Mode & 0o777; got != 0o444 {
		t.Errorf("after ignored chmod 0600: %o, want unchanged 0444", got)
	}
	if err := unix.Chmod(m.path("file"), 0o4644); errnoOf(err) != syscall.EPERM.Error() {
		t.Errorf("chmod 04644: %v, want EPERM", err)
	}
	if err := os.Chmod(m.path("dir"), 0o555); err != nil {
		t.Errorf("chmod dir 0555: %v", err)
	}
	if got := stat(t, m.path("dir")).Mode & 0o777; got != 0o755 {
		t.Errorf("dir after chmod 0555: %o, want 0755 (directories do not take the read-only attribute)", got)
	}
	if err := os.WriteFile(m.path("ro"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m.path("ro"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m.path("file"), 0o644); err != nil {
		t.Errorf("chmod back to 0644: %v", err)
	}

	// chown: only to the mount's owner and group.
	if err := os.Chown(m.path("file"), 1234, 5678); err != nil {
		t.Errorf("chown to the mount's owner: %v", err)
	}
	if err := os.Chown(m.path("file"), 1, -1); errnoOf(err) != syscall.EPERM.Error() {
		t.Errorf("chown to uid 1: %v, want EPERM", err)
	}
	if err := os.Chown(m.path("file"), -1, 1); errnoOf(err) != syscall.EPERM.Error() {
		t.Errorf("chown to gid 1: %v, want EPERM", err)
	}
	m.unmount()
	fsckClean(t, img)
	attrs := mtools(t, "mattrib", "-i", img, "::/ro", "::/file")
	if !regexp.MustCompile(`(?m)^\s*A?\s*R\s+.*ro`).MatchString(attrs) || regexp.MustCompile(`(?m)^\s*A?\s*R\s+.*file`).MatchString(attrs) {
		t.Errorf("mattrib: want the read-only attribute on ro and not on file:\n%s", attrs)
	}
}

// TestQuiet checks that quiet turns refused chmod and chown into silent no-ops.
func TestQuiet(t *testing.T) {
	needTools(t, "mkfs.fat")
	img := makeImage(t, 8192)
	m := mountImage(t, img, "quiet,uid=100,gid=100")
	if err := os.WriteFile(m.path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := stat(t, m.path("f"))
	if err := os.Chown(m.path("f"), 1, 1); err != nil {
		t.Errorf("chown under quiet: %v", err)
	}
	if err := unix.Chmod(m.path("f"), 0o4755); err != nil {
		t.Errorf("chmod 04755 under quiet: %v", err)
	}
	if after := stat(t, m.path("f")); after.Uid != 100 || after.Gid != 100 || after.Mode != before.Mode {
		t.Errorf("quiet changed something: %o %d:%d -> %o %d:%d", before.Mode, before.Uid, before.Gid, after.Mode, after.Uid, after.Gid)
	}
}

// TestStatfs compares statfs with what fsck.fat counts on the same volume.
func TestStatfs(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	img := makeImage(t, 32768, "-s", "8", "-S", "512")
	m := mountImage(t, img, "")
	if err := os.WriteFile(m.path("data"), bytes.Repeat([]byte("d"), 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(m.dir, &sf); err != nil {
		t.Fatal(err)
	}
	m.unmount()
	out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput()
	if err != nil {
		t.Fatalf("fsck.fat: %v\n%s", err, out)
	}
	mm := regexp.MustCompile(`(\d+)/(\d+) clusters`).FindStringSubmatch(string(out))
	if mm == nil {
		t.Fatalf("no cluster counts in fsck.fat output:\n%s", out)
	}
	used, _ := strconv.ParseUint(mm[1], 10, 64)
	total, _ := strconv.ParseUint(mm[2], 10, 64)
	if sf.Bsize != 4096 || sf.Frsize != 4096 {
		t.Errorf("bsize %d frsize %d, want the 4096-byte cluster", sf.Bsize, sf.Frsize)
	}
	if sf.Blocks != total || sf.Bfree != total-used || sf.Bavail != sf.Bfree {
		t.Errorf("blocks %d free %d avail %d; fsck.fat counts %d clusters, %d used", sf.Blocks, sf.Bfree, sf.Bavail, total, used)
	}
	if sf.Namelen != 255 {
		t.Errorf("namelen %d, want 255, the length every name up to which is accepted", sf.Namelen)
	}
}

// TestNameMax: names of 255 bytes, ASCII or not, are made, listed and removed; one of 256 ASCII
// characters (256 UTF-16 units) is ENAMETOOLONG, as statfs's name length says.
func TestNameMax(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	img := makeImage(t, 32768)
	m := mountImage(t, img, "")
	names := []string{strings.Repeat("n", 255), strings.Repeat("é", 127) + "x", strings.Repeat("€", 85)}
	for _, name := range names {
		if len(name) != 255 {
			t.Fatalf("test name of %d bytes", len(name))
		}
		if err := os.WriteFile(m.path(name), []byte("x"), 0o644); err != nil {
			t.Fatalf("create a %d-byte name: %v", len(name), err)
		}
	}
	ents, err := os.ReadDir(m.dir)
	if err != nil || len(ents) != len(names) {
		t.Fatalf("readdir: %d entries, %v", len(ents), err)
	}
	err = os.WriteFile(m.path(strings.Repeat("n", 256)), []byte("x"), 0o644)
	if !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Errorf("create a 256-byte name: %v, want ENAMETOOLONG", err)
	}
	for _, name := range names {
		if err := os.Remove(m.path(name)); err != nil {
			t.Errorf("remove a %d-byte name: %v", len(name), err)
		}
	}
	m.unmount()
	if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil {
		t.Fatalf("fsck.fat: %v\n%s", err, out)
	}
}

// TestInodeNumbers checks that a file keeps its inode number across renames and that an entry
// created where a renamed file used to be gets another.
func TestInodeNumbers(t *testing.T) {
	needTools(t, "mkfs.fat")
	img := makeImage(t, 8192)
	m := mountImage(t, img, "")
	if err := os.WriteFile(m.path("a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	ino := stat(t, m.path("a")).Ino
	entries := readdirInos(t, m.dir)
	if entries["a"] != ino {
		t.Errorf("readdir inode %d, stat %d", entries["a"], ino)
	}
	if err := os.Rename(m.path("a"), m.path("sub/b")); err != nil {
		t.Fatal(err)
	}
	if got := stat(t, m.path("sub/b")).Ino; got != ino {
		t.Errorf("after rename inode %d, was %d", got, ino)
	}
	if err := os.WriteFile(m.path("c"), []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := stat(t, m.path("c")).Ino; got == ino {
		t.Errorf("new file shares inode %d with the renamed one", got)
	}
	if got := readdirInos(t, m.path("sub"))["b"]; got != ino {
		t.Errorf("readdir of sub: b is inode %d, want %d", got, ino)
	}
	if b, err := os.ReadFile(m.path("sub/b")); err != nil || string(b) != "a" {
		t.Errorf("sub/b = %q, %v", b, err)
	}
}

func readdirInos(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	out := map[string]uint64{}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(b[16]) | int(b[17])<<8
			ino := uint64(0)
			for i := 7; i >= 0; i-- {
				ino = ino<<8 | uint64(b[i])
			}
			name := b[19:reclen]
			name = name[:bytes.IndexByte(name, 0)]
			out[string(name)] = ino
			b = b[reclen:]
		}
	}
}

// TestReadOnlyMount checks ro: nothing can change, and the image is left byte for byte as it was.
func TestReadOnlyMount(t *testing.T) {
	needTools(t, "mkfs.fat", "mcopy")
	img := makeImage(t, 8192)
	src := t.TempDir() + "/HELLO.TXT"
	os.WriteFile(src, []byte("hello"), 0o644)
	mtools(t, "mcopy", "-i", img, src, "::/HELLO.TXT")
	before := digest(t, img)
	m := mountImage(t, img, "ro")
	if b, err := os.ReadFile(m.path("hello.txt")); err != nil || string(b) != "hello" {
		t.Errorf("read: %q, %v", b, err)
	}
	for what, err := range map[string]error{
		"create":  os.WriteFile(m.path("new"), nil, 0o644),
		"write":   os.WriteFile(m.path("HELLO.TXT"), nil, 0o644),
		"mkdir":   os.Mkdir(m.path("d"), 0o755),
		"remove":  os.Remove(m.path("HELLO.TXT")),
		"chtimes": os.Chtimes(m.path("HELLO.TXT"), time.Now(), time.Now()),
	} {
		if errnoOf(err) != syscall.EROFS.Error() {
			t.Errorf("%s on ro: %v, want EROFS", what, err)
		}
	}
	m.unmount()
	if digest(t, img) != before {
		t.Errorf("the image changed under a read-only mount")
	}
}

func digest(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestSyncOption checks that under sync a change is on the image before the call returns: mtools
// reads it from the image while the volume is still mounted.
func TestSyncOption(t *testing.T) {
	needTools(t, "mkfs.fat", "mtype")
	img := makeImage(t, 8192)
	m := mountImage(t, img, "sync")
	if err := os.WriteFile(m.path("SYNCED.TXT"), []byte("on disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mtools(t, "mtype", "-i", img, "::/SYNCED.TXT"); out != "on disk" {
		t.Errorf("mtype while mounted: %q", out)
	}
}

// TestErrorsOption checks errors=: after a write error from the device, remount-ro refuses
// further changes with EROFS, continue carries on once the device works again.
func TestErrorsOption(t *testing.T) {
	needTools(t, "mkfs.fat")
	for _, mode := range []string{"remount-ro", "continue"} {
		t.Run(mode, func(t *testing.T) {
			img := makeImage(t, 8192)
			opts, err := mountopt.ParseOptions("errors=" + mode)
			if err != nil {
				t.Fatal(err)
			}
			dev, err := blockdev.Open(img, false)
			if err != nil {
				t.Fatal(err)
			}
			faulty := blockdev.NewFaulty(dev)
			vol, err := fatvol.Open(faulty, VolumeOptions(opts))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			srv, err := Mount(vol, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			m := &mounted{img: img, dir: dir, vol: vol, srv: srv, t: t, up: true}
			t.Cleanup(func() {
				if m.up {
					m.unmount()
				}
			})
			if err := os.WriteFile(m.path("before"), []byte("ok"), 0o644); err != nil {
				t.Fatal(err)
			}
			faulty.FailWritesAfter(0)
			// Writes are written back later; fsync makes the failure show.
			f, err := os.Create(m.path("during"))
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("lost"))
			if err := f.Sync(); errnoOf(err) != syscall.EIO.Error() {
				t.Errorf("fsync while writes fail: %v, want EIO", err)
			}
			f.Close()
			faulty.Disarm()
			err = os.WriteFile(m.path("after"), []byte("x"), 0o644)
			want := map[string]string{"remount-ro": syscall.EROFS.Error(), "continue": "ok"}[mode]
			if errnoOf(err) != want {
				t.Errorf("create after the error: %v, want %s", err, want)
			}
			if b, err := os.ReadFile(m.path("before")); err != nil || string(b) != "ok" {
				t.Errorf("reading after the error: %q, %v", b, err)
			}
			// Under remount-ro the engine stopped writing at the failure, so closing cannot
			// write back and says so; under continue it writes everything once the device works.
			if got := srv.Failure() != nil; got != (mode == "remount-ro") {
				t.Errorf("Failure() = %v after the error", srv.Failure())
			}
			m.up = false
			if err := srv.Unmount(); err != nil {
				t.Fatal(err)
			}
			srv.Wait()
			err = vol.Close()
			want = map[string]string{"remount-ro": syscall.EIO.Error(), "continue": "ok"}[mode]
			if errnoOf(err) != want {
				t.Errorf("closing the volume: %v, want %s", err, want)
			}
		})
	}
}

// TestFlushOption checks that under flush a file is on the image once it is closed.
func TestFlushOption(t *testing.T) {
	needTools(t, "mkfs.fat", "mtype")
	img := makeImage(t, 8192)
	m := mountImage(t, img, "flush")
	data := bytes.Repeat([]byte("flushed "), 5000)
	if err := os.WriteFile(m.path("FLUSHED.TXT"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Release reaches the server just after close(2) returns.
	deadline := time.Now().Add(2 * time.Second)
	for {
		cmd := exec.Command("mtype", "-i", img, "::/FLUSHED.TXT")
		cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
		out, err := cmd.Output()
		if err == nil && bytes.Equal(out, data) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("FLUSHED.TXT not on the image 2 s after close: %d bytes, %v", len(out), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConcurrentUse runs several writers in their own directories while another lists the root,
// as the kernel sends requests in parallel, and checks the result with fsck.fat and by reading
// every file back.
func TestConcurrentUse(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	img := makeImage(t, 65536)
	m := mountImage(t, img, "")
	const workers, files = 6, 60
	errs := make(chan error, workers+1)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			if _, err := os.ReadDir(m.dir); err != nil {
				errs <- err
				return
			}
		}
	}()
	for w := range workers {
		go func() {
			dir := m.path("w" + strconv.Itoa(w))
			if err := os.Mkdir(dir, 0o755); err != nil {
				errs <- err
				return
			}
			for i := range files {
				name := dir + "/f" + strconv.Itoa(i)
				data := bytes.Repeat([]byte{byte(w), byte(i)}, 3000+i*100)
				if err := os.WriteFile(name+".tmp", data, 0o644); err != nil {
					errs <- err
					return
				}
				if err := os.Rename(name+".tmp", name); err != nil {
					errs <- err
					return
				}
				if i%3 == 0 {
					if err := os.Remove(name); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	if err := <-errs; err != nil {
		t.Error(err)
	}
	check := func(root string) {
		for w := range workers {
			for i := range files {
				b, err := os.ReadFile(root + "/w" + strconv.Itoa(w) + "/f" + strconv.Itoa(i))
				switch {
				case i%3 == 0 && err == nil:
					t.Errorf("w%d/f%d should be gone", w, i)
				case i%3 != 0 && (err != nil || !bytes.Equal(b, bytes.Repeat([]byte{byte(w), byte(i)}, 3000+i*100))):
					t.Errorf("w%d/f%d: %d bytes, %v", w, i, len(b), err)
				}
			}
		}
	}
	check(m.dir)
	m.unmount()
	fsckClean(t, img)
	m2 := mountImage(t, img, "ro")
	check(m2.dir)
}
