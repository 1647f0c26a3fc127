package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// runMountToExit runs `csi-fat mount` that is expected to fail before mounting, and returns its
// exit code and output.
func runMountToExit(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"mount"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		if dir := args[len(args)-1]; isMounted(dir) {
			exec.Command("fusermount3", "-u", "-z", dir).Run()
		}
		t.Fatalf("csi-fat mount %v still runs after 20 s; it should have refused\n%s", args, out.String())
		return -1, ""
	}
}

// unmountAndWait unmounts a running `csi-fat mount` and requires exit status 0. The unmount is
// tried again for a while: something else on the machine may have the mount busy for a moment.
func unmountAndWait(t *testing.T, p *mountProcess) {
	t.Helper()
	for try := 0; ; try++ {
		out, err := exec.Command("fusermount3", "-u", p.dir).CombinedOutput()
		if err == nil {
			break
		}
		if try == 20 {
			t.Fatalf("fusermount3 -u: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit status %d\n%s", code, p.stderr)
	}
}

// TestMountMountpointErrors: a missing mount point and one that is a file are named as such,
// before the image is opened (it stays byte for byte as it was).
func TestMountMountpointErrors(t *testing.T) {
	mountTools(t)
	bin := buildCsiFat(t)
	img := mkfsImage(t, "8192")
	sum := fileSum(t, img)
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ dir, want string }{
		{filepath.Join(t.TempDir(), "missing"), "no such directory"},
		{file, "is not a directory"},
	} {
		code, out := runMountToExit(t, bin, img, tt.dir)
		if code != 1 || !strings.Contains(out, tt.dir) || !strings.Contains(out, tt.want) {
			t.Errorf("mount on %s: exit %d, %q; want 1 and a message naming it with %q", tt.dir, code, out, tt.want)
		}
		if strings.Contains(out, "fusermount") {
			t.Errorf("mount on %s: the message is fusermount's, not ours: %q", tt.dir, out)
		}
	}
	if fileSum(t, img) != sum {
		t.Errorf("the image changed although nothing was mounted")
	}
}

// TestMountSourceIsAbsolute: /proc/mounts names the image by its absolute path when the mount
// was given a relative one.
func TestMountSourceIsAbsolute(t *testing.T) {
	mountTools(t)
	bin := buildCsiFat(t)
	img := mkfsImage(t, "8192")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, img)
	if err != nil || filepath.IsAbs(rel) {
		t.Fatalf("no relative path from %s to %s: %v", wd, img, err)
	}
	p := startMount(t, bin, rel)
	if got := mountSource(t, p.dir); got != img {
		t.Errorf("/proc/mounts shows the source as %q, want %q (given as %q)", got, img, rel)
	}
	unmountAndWait(t, p)
}

// mountSource is the source field of dir's line in /proc/mounts.
func mountSource(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.Open("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 2 && fields[1] == dir {
			return fields[0]
		}
	}
	t.Fatalf("%s is not in /proc/mounts", dir)
	return ""
}
