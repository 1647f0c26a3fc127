package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// binRun is one run of the built csi-fat binary.
type binRun struct {
	stdout, stderr string
	code           int
}

func runBin(t *testing.T, bin string, args ...string) binRun {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("csi-fat %v: %v", args, err)
	}
	return binRun{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// sha256File hashes an image or a whole block device.
func sha256File(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// settle writes a file through the mount and fsyncs it, which writes everything the volume
// holds, so the serving process has nothing left to write and the medium's checksum stays put
// while it idles. (syncfs would not do: the kernel does not pass it on to a FUSE server.)
func settle(t *testing.T, dir, name, content string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", name, err)
	}
}

// refusedWriters runs every other opener for writing against medium, which the mount p serves,
// and checks each is refused with holder named and leaves the medium's bytes as they were.
func refusedWriters(t *testing.T, bin, medium, holder string) {
	t.Helper()
	before := sha256File(t, medium)
	second := t.TempDir()
	for _, args := range [][]string{
		{"mount", medium, second},
		{"mkfs", "-n", "OTHER", medium},
		{"fsck", "-a", medium},
	} {
		r := runBin(t, bin, args...)
		if r.code == 0 || !strings.Contains(r.stderr, holder) || !strings.Contains(r.stderr, "refusing to open it for writing") {
			t.Errorf("csi-fat %s with a mount serving it: exit %d, stderr %q; want refused naming %q", strings.Join(args, " "), r.code, r.stderr, holder)
		}
		if isMounted(second) {
			t.Errorf("csi-fat %s mounted", strings.Join(args, " "))
		}
	}
	if sha256File(t, medium) != before {
		t.Fatalf("%s changed while refused writers ran", medium)
	}
}

// checkBeside runs csi-fat fsck -n beside the mount: it checks, warning of the writer; the
// only problem is the dirty bit the serving mount holds set.
func checkBeside(t *testing.T, bin, medium, holder string) {
	t.Helper()
	before := sha256File(t, medium)
	r := runBin(t, bin, "fsck", "-n", medium)
	if r.code != fsckProblems || !strings.Contains(r.stderr, "warning: "+medium+" is in use by a writer ("+holder) ||
		!strings.Contains(r.stdout, "dirty bit is set") || !strings.Contains(r.stdout, medium+": 1 files, ") {
		t.Errorf("csi-fat fsck -n beside a mount: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if sha256File(t, medium) != before {
		t.Fatalf("csi-fat fsck -n changed %s", medium)
	}
}

// TestMountClaimImage: a second csi-fat mount of a served image, mkfs and fsck -a on it are
// refused naming the mount's process, with nothing written; fsck -n and mount -o ro work beside
// it with a warning; the first writer's files survive, judged by fsck.fat and mtype.
func TestMountClaimImage(t *testing.T) {
	mountTools(t, "fsck.fat", "mtype")
	bin := buildCsiFat(t)
	img := mkfsImage(t, "32768")
	p := startMount(t, bin, img)
	settle(t, p.dir, "first.txt", "the first writer's")
	holder := fmt.Sprintf("pid %d, csi-fat mount", p.cmd.Process.Pid)
	refusedWriters(t, bin, img, holder)
	// Growing the image is writing too.
	if r := runBin(t, bin, "mkfs", "--size", "64M", img); r.code == 0 || !strings.Contains(r.stderr, holder) {
		t.Errorf("csi-fat mkfs --size on a served image: exit %d, %q", r.code, r.stderr)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 32<<20 {
		t.Fatalf("served image resized: %v", err)
	}
	checkBeside(t, bin, img, holder)

	ro := startMount(t, bin, img, "-o", "ro")
	if got, err := os.ReadFile(filepath.Join(ro.dir, "first.txt")); err != nil || string(got) != "the first writer's" {
		t.Errorf("read-only mount beside the writer: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(ro.dir, "no.txt"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write to the read-only mount: %v", err)
	}
	unmountSoon(t, ro.dir)
	ro.wait(t)
	// Read once it exited: until then the copy into the buffer may still be running.
	if !strings.Contains(ro.stderr.String(), "warning: "+img+" is in use by a writer ("+holder) {
		t.Errorf("read-only mount beside the writer did not warn: %s", ro.stderr)
	}

	unmountSoon(t, p.dir)
	if code := p.wait(t); code != 0 {
		t.Fatalf("first mount exit %d\n%s", code, p.stderr)
	}
	if ok, out := fsckOutput(t, img); !ok {
		t.Errorf("fsck.fat -n after the mount:\n%s", out)
	}
	if got := mtypeFile(t, img, "first.txt"); got != "the first writer's" {
		t.Errorf("first.txt = %q", got)
	}
	// Released at exit: the next writer is let in.
	p2 := startMount(t, bin, img)
	unmountSoon(t, p2.dir)
	p2.wait(t)
}

// unmountSoon unmounts a FUSE mount, retrying while it is busy: the kernel may still hold the
// mount for a file closed a moment ago until the server has answered its release.
func unmountSoon(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("fusermount3", "-u", dir).CombinedOutput()
		if err == nil {
			return
		}
		if !strings.Contains(string(out), "busy") || time.Now().After(deadline) {
			t.Fatalf("fusermount3 -u %s: %v %s", dir, err, out)
		}
	}
}

// attachLoop attaches file as a loop device and detaches it at cleanup.
func attachLoop(t *testing.T, file string) string {
	t.Helper()
	testenv.RequireLoop(t)
	out, err := exec.Command("losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// TestMountClaimLoopDevice: csi-fat mount of a loop device opens it O_EXCL, so another mount,
// csi-fat mkfs and fsck -a on it and mkfs.fat (which opens O_EXCL too) are refused with the
// device's bytes unchanged; fsck -n works beside it with a warning.
func TestMountClaimLoopDevice(t *testing.T) {
	mountTools(t, "fsck.fat", "mtype")
	bin := buildCsiFat(t)
	img := mkfsImage(t, "32768")
	dev := attachLoop(t, img)
	p := startMount(t, bin, dev)
	settle(t, p.dir, "first.txt", "the first writer's")
	holder := fmt.Sprintf("is in use (open for writing by pid %d, csi-fat mount)", p.cmd.Process.Pid)
	refusedWriters(t, bin, dev, holder)
	before := sha256File(t, dev)
	if out, err := exec.Command("mkfs.fat", dev).CombinedOutput(); err == nil {
		t.Errorf("mkfs.fat on a device csi-fat mount serves succeeded: %s", out)
	}
	if sha256File(t, dev) != before {
		t.Fatal("mkfs.fat changed the served device")
	}
	checkBeside(t, bin, dev, fmt.Sprintf("open for writing by pid %d, csi-fat mount", p.cmd.Process.Pid))

	unmountSoon(t, p.dir)
	if code := p.wait(t); code != 0 {
		t.Fatalf("mount exit %d\n%s", code, p.stderr)
	}
	if ok, out := fsckOutput(t, dev); !ok {
		t.Errorf("fsck.fat -n after the mount:\n%s", out)
	}
	if got := mtypeFile(t, img, "first.txt"); got != "the first writer's" {
		t.Errorf("first.txt = %q", got)
	}
	if r := runBin(t, bin, "fsck", "-a", dev); r.code != fsckClean {
		t.Errorf("csi-fat fsck -a once the mount is gone: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
}
