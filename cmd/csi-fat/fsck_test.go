package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

func needFsckTools(t *testing.T) {
	t.Helper()
	testenv.RequireTool(t, "mkfs.fat", "fsck.fat", "mcopy")
}

// fsckRun is one run of the fsck subcommand, in process.
type fsckRun struct {
	stdout, stderr string
	code           int
}

func runFsckCmd(args ...string) fsckRun {
	var out, errb bytes.Buffer
	code := fsckMain(args, &out, &errb)
	return fsckRun{out.String(), errb.String(), code}
}

// refFsck runs fsck.fat -n: its exit code and output.
func refFsck(t *testing.T, img string) (int, string) {
	t.Helper()
	out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	if exit != nil {
		return exit.ExitCode(), string(out)
	}
	return 0, string(out)
}

// fsckTestImage makes a FAT16 image with mkfs.fat and copies a file and a directory into it.
func fsckTestImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	img := filepath.Join(dir, "vol.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "sub dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub dir", "hello world.txt"), bytes.Repeat([]byte("x"), 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"mkfs.fat", "-F", "16", img},
		{"mcopy", "-s", "-i", img, filepath.Join(src, "sub dir"), "::/"},
	} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	return img
}

var fsckSummaryRE = regexp.MustCompile(`(?m)^(.*): (\d+) files, (\d+)/(\d+) clusters$`)

func TestFsckCommandClean(t *testing.T) {
	needFsckTools(t)
	img := fsckTestImage(t)
	r := runFsckCmd("-n", img)
	if r.code != fsckClean {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	code, ref := refFsck(t, img)
	if code != 0 {
		t.Fatalf("fsck.fat -n exit %d:\n%s", code, ref)
	}
	ours := fsckSummaryRE.FindString(r.stdout)
	theirs := fsckSummaryRE.FindString(ref)
	if ours == "" || ours != theirs {
		t.Errorf("summary line %q, fsck.fat prints %q", ours, theirs)
	}
	if r.stderr != "" {
		t.Errorf("stderr with -n: %q", r.stderr)
	}
	v := runFsckCmd("-n", "-v", img)
	if v.code != 0 || !strings.Contains(v.stdout, "FAT16, 1 files, 1 directories") {
		t.Errorf("-v: exit %d, stdout %q", v.code, v.stdout)
	}
}

func TestFsckCommandProblems(t *testing.T) {
	needFsckTools(t)
	img := fsckTestImage(t)
	// Set the dirty bit (FAT16: boot sector byte 37) and break the directory's size.
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x01}, 37); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := runFsckCmd("-n", img)
	if r.code != fsckProblems {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "dirty bit is set") || fsckSummaryRE.FindString(r.stdout) == "" {
		t.Errorf("stdout lacks the problem or the summary:\n%s", r.stdout)
	}
	if code, ref := refFsck(t, img); code == 0 || !strings.Contains(ref, "Dirty bit is set") {
		t.Errorf("fsck.fat -n exit %d:\n%s", code, ref)
	}

	// Without -n or -a: a notice, and the same check.
	r2 := runFsckCmd(img)
	if r2.code != fsckProblems || !strings.Contains(r2.stderr, "no -a: checking only") || r2.stdout != r.stdout {
		t.Errorf("without -n: exit %d, stderr %q, stdout %q", r2.code, r2.stderr, r2.stdout)
	}
}

func TestFsckCommandCannotCheck(t *testing.T) {
	dir := t.TempDir()
	notFAT := filepath.Join(dir, "random.img")
	if err := os.WriteFile(notFAT, bytes.Repeat([]byte("not a file system "), 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"not FAT", []string{"-n", notFAT}},
		{"missing path", []string{"-n", filepath.Join(dir, "nope.img")}},
		{"a directory", []string{"-n", dir}},
		{"no path", []string{"-n"}},
		{"two paths", []string{"-n", notFAT, notFAT}},
		{"unknown flag", []string{"-x", notFAT}},
		{"-n with -a", []string{"-n", "-a", notFAT}},
		{"-a on a missing path", []string{"-a", filepath.Join(dir, "nope.img")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runFsckCmd(tc.args...)
			if r.code != fsckFailed {
				t.Errorf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if r.stderr == "" {
				t.Error("nothing on stderr")
			}
		})
	}
	if _, err := exec.LookPath("fsck.fat"); err == nil {
		if code, out := refFsck(t, notFAT); code == 0 {
			t.Errorf("fsck.fat -n accepts the non-FAT file:\n%s", out)
		}
	}
}

func TestFsckCommandHelp(t *testing.T) {
	r := runFsckCmd("--help")
	if r.code != 0 {
		t.Errorf("--help exit %d", r.code)
	}
	for _, want := range []string{"usage: csi-fat fsck [-n | -a] [-v] [--partition N] PATH", "first FAT partition", "-n", "-a", "-v", "exit status", "4 (-a)", "FSCKnnnn.REC"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("--help lacks %q:\n%s", want, r.stderr)
		}
	}
	if commands["fsck"] == nil {
		t.Error("fsck is not registered as a subcommand")
	}
}

// TestFsckBinaryExitCodes runs the built binary as a user would: 0 clean, 1 problems (or
// repaired with -a), 2 could not check, 4 not safely repairable with -a.
func TestFsckBinaryExitCodes(t *testing.T) {
	needFsckTools(t)
	bin := filepath.Join(t.TempDir(), "csi-fat")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	clean := fsckTestImage(t)
	dirty := fsckTestImage(t)
	f, err := os.OpenFile(dirty, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x01}, 37); err != nil {
		t.Fatal(err)
	}
	f.Close()
	broken := fsckTestImage(t)
	patchFAT16(t, broken, startCluster(t, broken, "HELLOW~1TXT"), 0, false)
	for _, tc := range []struct {
		mode, path string
		want       int
	}{
		{"-n", clean, 0}, {"-n", dirty, 1}, {"-n", filepath.Join(t.TempDir(), "missing.img"), 2},
		{"-a", broken, 4}, {"-a", dirty, 1}, {"-a", dirty, 0},
	} {
		cmd := exec.Command(bin, "fsck", tc.mode, tc.path)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		if code := cmd.ProcessState.ExitCode(); code != tc.want {
			t.Errorf("csi-fat fsck %s %s: exit %d, want %d\n%s", tc.mode, tc.path, code, tc.want, out)
		}
	}
}

// patchFAT16 sets FAT entry cluster to value in both FATs of a FAT16 image made by
// fsckTestImage, and optionally the dirty bit.
func patchFAT16(t *testing.T, img string, cluster, value uint16, dirty bool) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	boot := make([]byte, 512)
	if _, err := f.ReadAt(boot, 0); err != nil {
		t.Fatal(err)
	}
	reserved := int64(binary.LittleEndian.Uint16(boot[14:]))
	fatSectors := int64(binary.LittleEndian.Uint16(boot[22:]))
	for i := int64(0); i < 2; i++ {
		var b [2]byte
		binary.LittleEndian.PutUint16(b[:], value)
		if _, err := f.WriteAt(b[:], (reserved+i*fatSectors)*512+int64(cluster)*2); err != nil {
			t.Fatal(err)
		}
	}
	if dirty {
		if _, err := f.WriteAt([]byte{0x01}, 37); err != nil {
			t.Fatal(err)
		}
	}
}

// startCluster finds the short entry named name (11 bytes) in the image and returns its start.
func startCluster(t *testing.T, img, name string) uint16 {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(name))
	if i < 0 || i%32 != 0 {
		t.Fatalf("no directory entry %q", name)
	}
	return binary.LittleEndian.Uint16(b[i+26:])
}

// TestFsckCommandRepair: -a repairs a dirty volume with a lost chain (exit 1), after which both
// checkers call it clean and -a has nothing to do (exit 0); a chain into a free cluster is
// refused (exit 4) with the image left as it was.
func TestFsckCommandRepair(t *testing.T) {
	needFsckTools(t)
	img := fsckTestImage(t)
	patchFAT16(t, img, 1000, 1001, false)
	patchFAT16(t, img, 1001, 0xFFFF, true)
	r := runFsckCmd("-a", img)
	if r.code != fsckProblems || !strings.Contains(r.stdout, "Repaired 2 error(s)") {
		t.Fatalf("-a: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if code, ref := refFsck(t, img); code != 0 {
		t.Fatalf("fsck.fat -n after -a: exit %d\n%s", code, ref)
	}
	if again := runFsckCmd("-a", img); again.code != fsckClean {
		t.Errorf("-a again: exit %d\n%s", again.code, again.stdout)
	}

	broken := fsckTestImage(t)
	patchFAT16(t, broken, startCluster(t, broken, "HELLOW~1TXT"), 0, true)
	before, err := os.ReadFile(broken)
	if err != nil {
		t.Fatal(err)
	}
	r = runFsckCmd("-a", broken)
	if r.code != fsckUncorrected || !strings.Contains(r.stdout, "Not repaired, nothing written") ||
		!strings.Contains(r.stdout, "/sub dir/hello world.txt: contains a free cluster") {
		t.Fatalf("-a on a broken chain: exit %d, want 4\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	after, err := os.ReadFile(broken)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("-a changed an image it refused to repair")
	}
}
