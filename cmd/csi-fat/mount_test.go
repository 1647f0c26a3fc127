package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// mountTools skips unless FUSE and the tools the test names are here.
func mountTools(t *testing.T, tools ...string) {
	t.Helper()
	testenv.RequireFUSE(t)
	testenv.RequireTool(t, append([]string{"mkfs.fat"}, tools...)...)
}

// buildCsiFat builds the command into the test's temporary directory.
func buildCsiFat(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "csi-fat")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func mkfsImage(t *testing.T, kib string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "vol.img")
	if out, err := exec.Command("mkfs.fat", "-C", img, kib).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat: %v\n%s", err, out)
	}
	return img
}

// mountProcess is `csi-fat mount` running for a test.
type mountProcess struct {
	cmd    *exec.Cmd
	dir    string
	stderr *bytes.Buffer
	exited chan error
}

// startMount runs `csi-fat mount` and waits until the kernel lists the mount. Cleanup kills it
// if it still runs and detaches the mount if it is still there.
func startMount(t *testing.T, bin, img string, args ...string) *mountProcess {
	t.Helper()
	return startMountWith(t, bin, img, nil, args...)
}

// startMountWith is startMount calling started with the process's id as soon as it runs.
func startMountWith(t *testing.T, bin, img string, started func(pid int), args ...string) *mountProcess {
	t.Helper()
	dir := t.TempDir()
	p := &mountProcess{dir: dir, stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, append(append([]string{"mount"}, args...), img, dir)...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if started != nil {
		started(p.cmd.Process.Pid)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		if isMounted(dir) {
			exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !isMounted(dir) {
		select {
		case err := <-p.exited:
			t.Fatalf("csi-fat mount exited early: %v\n%s", err, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never mounted\n%s", dir, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// isMounted reads /proc/self/mountinfo for a FUSE mount at dir.
func isMounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && fields[4] == dir && strings.Contains(sc.Text(), " - fuse") {
			return true
		}
	}
	return false
}

// wait returns the exit code once the process ends.
func (p *mountProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-p.exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return 0
	case <-time.After(20 * time.Second):
		t.Fatalf("csi-fat mount did not exit\n%s", p.stderr)
		return -1
	}
}

// fsckOutput runs fsck.fat -n and returns whether it was clean and what it said.
func fsckOutput(t *testing.T, img string) (bool, string) {
	t.Helper()
	out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput()
	return err == nil, string(out)
}

func mtypeFile(t *testing.T, img, name string) string {
	t.Helper()
	cmd := exec.Command("mtype", "-i", img, "::/"+name)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mtype %s: %v\n%s", name, err, out)
	}
	return string(out)
}

// TestMountCommandSIGTERM: SIGTERM while a file is still open detaches the mount, and once the
// file is closed everything is written back, the volume is clean, and the exit status is 0.
func TestMountCommandSIGTERM(t *testing.T) {
	mountTools(t, "fsck.fat", "mtype")
	bin := buildCsiFat(t)
	img := mkfsImage(t, "32768")
	p := startMount(t, bin, img)
	if err := os.WriteFile(filepath.Join(p.dir, "Kept.txt"), []byte("kept across SIGTERM"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(p.dir, "open.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("written while open")); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	f.Close()
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit status %d\n%s", code, p.stderr)
	}
	if isMounted(p.dir) {
		t.Errorf("still mounted after exit")
	}
	if ok, out := fsckOutput(t, img); !ok {
		t.Errorf("fsck.fat -n after SIGTERM:\n%s", out)
	}
	if got := mtypeFile(t, img, "Kept.txt"); got != "kept across SIGTERM" {
		t.Errorf("Kept.txt = %q", got)
	}
	if got := mtypeFile(t, img, "open.txt"); got != "written while open" {
		t.Errorf("open.txt = %q", got)
	}
}

// TestMountCommandExternalUnmount: fusermount3 -u ends the server with a clean volume.
func TestMountCommandExternalUnmount(t *testing.T) {
	mountTools(t, "fsck.fat", "mtype")
	bin := buildCsiFat(t)
	img := mkfsImage(t, "8192")
	p := startMount(t, bin, img, "-o", "uid=0")
	if err := os.Mkdir(filepath.Join(p.dir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, "dir", "f.txt"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Another process of the machine may hold the mount a moment (a scan of the file systems,
	// say): busy is retried, as an administrator would.
	for try := 0; ; try++ {
		out, err := exec.Command("fusermount3", "-u", p.dir).CombinedOutput()
		if err == nil {
			break
		}
		if try == 20 || !bytes.Contains(out, []byte("busy")) {
			t.Fatalf("fusermount3 -u: %v\n%s", err, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit status %d\n%s", code, p.stderr)
	}
	if ok, out := fsckOutput(t, img); !ok {
		t.Errorf("fsck.fat -n:\n%s", out)
	}
	if got := mtypeFile(t, img, "dir/f.txt"); got != "f" {
		t.Errorf("dir/f.txt = %q", got)
	}
}

// TestMountCommandSIGKILL: killed outright, the server leaves a volume that is dirty but whole:
// it opens again, fsck.fat finds nothing worse than the dirty bit (or lost clusters), and what
// was fsync'ed is there.
func TestMountCommandSIGKILL(t *testing.T) {
	mountTools(t, "fsck.fat", "mtype")
	bin := buildCsiFat(t)
	img := mkfsImage(t, "65536")
	p := startMount(t, bin, img)
	data := bytes.Repeat([]byte("durable "), 200000)
	f, err := os.Create(filepath.Join(p.dir, "durable.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Mkdir(filepath.Join(p.dir, "synced-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(filepath.Join(p.dir, "synced-dir"))
	if err != nil {
		t.Fatal(err)
	}
	d.Sync()
	d.Close()
	// Unsynced work in flight when the kill lands.
	g, err := os.Create(filepath.Join(p.dir, "in-flight.bin"))
	if err != nil {
		t.Fatal(err)
	}
	g.Write(bytes.Repeat([]byte("x"), 1<<20))
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(t)
	g.Close()
	exec.Command("fusermount3", "-u", "-z", p.dir).Run()

	_, out := fsckOutput(t, img)
	if !strings.Contains(out, "Dirty bit is set") {
		t.Errorf("fsck.fat does not see the dirty bit after SIGKILL:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if allowedAfterCrash(line) {
			continue
		}
		t.Errorf("fsck.fat -n reports more than the dirty bit: %q\n%s", line, out)
	}
	vol, err := fatvol.OpenImage(img, fatvol.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the volume does not open again: %v", err)
	}
	defer vol.Close()
	got, err := readAll(vol, "durable.bin")
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("fsync'ed durable.bin: %d bytes (want %d), %v", len(got), len(data), err)
	}
	if fi, err := vol.Stat("synced-dir"); err != nil || !fi.IsDir() {
		t.Errorf("synced-dir: %v", err)
	}
	if got := mtypeFile(t, img, "durable.bin"); got != string(data) {
		t.Errorf("mtype durable.bin: %d bytes, want %d", len(got), len(data))
	}
}

// allowedAfterCrash accepts fsck.fat's lines about the dirty bit and lost clusters.
func allowedAfterCrash(line string) bool {
	line = strings.TrimSpace(line)
	for _, ok := range []string{"", "fsck.fat ", "Dirty bit is set", "Automatically removing dirty bit",
		"Leaving filesystem unchanged", "Reclaimed", "unused cluster", "lost cluster", "files,"} {
		if ok == "" && line == "" || ok != "" && strings.Contains(line, ok) {
			return true
		}
	}
	return false
}

func readAll(vol *fatvol.Volume, name string) ([]byte, error) {
	f, err := vol.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}

// TestMountCommandUsage: --help documents every option; bad options and operands exit 2 with a
// message that names them.
func TestMountCommandUsage(t *testing.T) {
	bin := buildCsiFat(t)
	out, err := exec.Command(bin, "mount", "--help").CombinedOutput()
	if err != nil {
		t.Errorf("mount --help: %v", err)
	}
	for _, opt := range []string{"ro", "rw", "uid=", "gid=", "umask=", "dmask=", "fmask=", "allow_utime=",
		"shortname=", "flush", "sync", "quiet", "errors=", "allow_other", "nosuid", "nodev", "noexec",
		"noatime", "relatime", "tz=UTC", "time_offset=", "-o", "partition=N|GUID", "first FAT partition"} {
		if !bytes.Contains(out, []byte(opt)) {
			t.Errorf("--help does not mention %s:\n%s", opt, out)
		}
	}
	for _, tt := range []struct {
		args    []string
		mention string
	}{
		{[]string{"mount", "-o", "ro,frobnicate", "img", "dir"}, "frobnicate"},
		{[]string{"mount", "img", "dir", "-o", "errors=panic"}, "panic"},
		{[]string{"mount", "img"}, "MOUNTPOINT"},
		{[]string{"mount", "--bogus", "img", "dir"}, "bogus"},
		{[]string{"mount", "-o", "partition=", "img", "dir"}, "partition="},
	} {
		cmd := exec.Command(bin, tt.args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit status 2\n%s", tt.args, err, out)
		}
		if !bytes.Contains(out, []byte(tt.mention)) {
			t.Errorf("%v: message does not name %q:\n%s", tt.args, tt.mention, out)
		}
	}
	// A missing image is reported, not a crash.
	out, err = exec.Command(bin, "mount", filepath.Join(t.TempDir(), "missing.img"), t.TempDir()).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !bytes.Contains(out, []byte("missing.img")) {
		t.Errorf("missing image: %v\n%s", err, out)
	}
}

// TestServerNeverAsksItsOwnMount: the server sends no request to its own mount (go-fuse's debug
// log names the thread of every request's caller), but for the one go-fuse makes by design at
// the mount (opening and polling .go-fuse-epoll-hack). One that did and was killed while waiting
// for the answer would hang in the kernel for good, a zombie holding the FUSE connection open:
// the statfs of the mount point that raised its read-ahead did exactly that.
func TestServerNeverAsksItsOwnMount(t *testing.T) {
	mountTools(t)
	bin := buildCsiFat(t)
	img := mkfsImage(t, "32768")
	p := startMount(t, bin, img, "-o", "debug")
	if err := os.WriteFile(filepath.Join(p.dir, "f.txt"), []byte("through the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(p.dir, "f.txt")); err != nil || string(got) != "through the mount" {
		t.Fatalf("read back %q, %v", got, err)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	server := map[string]bool{}
	for _, task := range tasks {
		server[task.Name()] = true
	}
	unmountAndWait(t, p)
	request := regexp.MustCompile(`rx \d+: ([A-Z_]+) n(\d+) (.*) p(\d+)$`)
	const pollHackNode = "18446744073709551615"
	seen := 0
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		m := request.FindStringSubmatch(line)
		if m == nil || !server[m[4]] {
			continue
		}
		seen++
		op, node, args := m[1], m[2], m[3]
		pollHack := node == pollHackNode || (op == "LOOKUP" && strings.Contains(args, ".go-fuse-epoll-hack")) || (op == "GETATTR" && node == "1")
		if !pollHack {
			t.Errorf("the server asked its own mount: %s", line)
		}
	}
	if seen == 0 {
		t.Fatalf("not even go-fuse's poll hack from the server's threads %v in the debug log: the log's format changed?\n%s", server, p.stderr)
	}
}
