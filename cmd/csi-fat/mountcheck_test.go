package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

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
	sum := sha256File(t, img)
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
	if sha256File(t, img) != sum {
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

// killWithLostClusters mounts img, leaves a file's clusters allocated with its removal durable
// (the file is open when it is removed, so its clusters wait for the last close) and kills the
// server: the volume is dirty and has lost clusters, as after a crash.
func killWithLostClusters(t *testing.T, bin, img string) {
	t.Helper()
	p := startMount(t, bin, img)
	if err := os.WriteFile(filepath.Join(p.dir, "kept.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	held := filepath.Join(p.dir, "held.bin")
	if err := os.WriteFile(held, bytes.Repeat([]byte("h"), 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(held); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil { // the removal (and kept.txt) on the disk
		t.Fatal(err)
	}
	d.Close()
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(t)
	f.Close()
	exec.Command("fusermount3", "-u", "-z", p.dir).Run()
}

// TestMountDirtyVolume is issue 17's third part: after a SIGKILL the volume is dirty with lost
// clusters. A plain mount warns as vfat does and a clean unmount leaves the dirty bit (and the
// lost clusters) for fsck; -o check refuses it and writes nothing; -o repair repairs it before
// serving, and its clean unmount leaves the volume clean.
func TestMountDirtyVolume(t *testing.T) {
	mountTools(t, "fsck.fat", "mtype")
	bin := buildCsiFat(t)
	img := mkfsImage(t, "32768")
	killWithLostClusters(t, bin, img)
	_, out := fsckOutput(t, img)
	if !strings.Contains(out, "Dirty bit is set") || !strings.Contains(out, "Reclaimed") {
		t.Fatalf("after the kill fsck.fat -n should see the dirty bit and lost clusters:\n%s", out)
	}

	p := startMount(t, bin, img)
	if got, err := os.ReadFile(filepath.Join(p.dir, "kept.txt")); err != nil || string(got) != "kept" {
		t.Errorf("kept.txt: %q, %v", got, err)
	}
	unmountAndWait(t, p)
	if !strings.Contains(p.stderr.String(), "Volume was not properly unmounted. Some data may be corrupt. Please run fsck") {
		t.Errorf("no warning at the mount of a dirty volume:\n%s", p.stderr)
	}
	_, out = fsckOutput(t, img)
	if !strings.Contains(out, "Dirty bit is set") || !strings.Contains(out, "Reclaimed") {
		t.Errorf("a plain mount and clean unmount must leave the dirty bit and the lost clusters for fsck:\n%s", out)
	}

	sum := sha256File(t, img)
	code, msg := runMountToExit(t, bin, "-o", "check", img, t.TempDir())
	if code != 1 || !strings.Contains(msg, "lost") || !strings.Contains(msg, "-o repair") {
		t.Errorf("-o check of a volume with lost clusters: exit %d, %q; want 1, naming them and -o repair", code, msg)
	}
	if sha256File(t, img) != sum {
		t.Errorf("-o check wrote to the volume")
	}

	p = startMount(t, bin, img, "-o", "repair")
	if err := os.WriteFile(filepath.Join(p.dir, "after.txt"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	unmountAndWait(t, p) // stderr is read once the process is gone
	if !strings.Contains(p.stderr.String(), "repaired before mounting") {
		t.Errorf("-o repair does not say what it repaired:\n%s", p.stderr)
	}
	if ok, out := fsckOutput(t, img); !ok || strings.Contains(out, "Reclaimed") || strings.Contains(out, "Dirty bit") {
		t.Errorf("after -o repair and a clean unmount fsck.fat -n should find nothing:\n%s", out)
	}
	if got := mtypeFile(t, img, "kept.txt"); got != "kept" {
		t.Errorf("kept.txt after the repair: %q", got)
	}
	if got := mtypeFile(t, img, "after.txt"); got != "after" {
		t.Errorf("after.txt: %q", got)
	}
}

// TestMountCheckClearsDirtyBit: a volume killed with everything durable has only the dirty bit
// set; -o check finds nothing else, mounts it, and the clean unmount clears the bit.
func TestMountCheckClearsDirtyBit(t *testing.T) {
	mountTools(t, "fsck.fat", "mtype")
	bin := buildCsiFat(t)
	img := mkfsImage(t, "32768")
	p := startMount(t, bin, img)
	if err := os.WriteFile(filepath.Join(p.dir, "f.txt"), []byte("synced"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(t)
	exec.Command("fusermount3", "-u", "-z", p.dir).Run()
	_, out := fsckOutput(t, img)
	if !strings.Contains(out, "Dirty bit is set") {
		t.Fatalf("no dirty bit after the kill:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if !allowedAfterCrash(line) || strings.Contains(line, "Reclaimed") {
			t.Fatalf("after the kill fsck.fat -n should see the dirty bit alone, it says %q:\n%s", line, out)
		}
	}

	p = startMount(t, bin, img, "-o", "check")
	unmountAndWait(t, p)
	if !strings.Contains(p.stderr.String(), "clean unmount clears the dirty bit") {
		t.Errorf("-o check does not say it will clear the dirty bit:\n%s", p.stderr)
	}
	if ok, out := fsckOutput(t, img); !ok {
		t.Errorf("after -o check and a clean unmount fsck.fat -n should find nothing:\n%s", out)
	}
	if got := mtypeFile(t, img, "f.txt"); got != "synced" {
		t.Errorf("f.txt: %q", got)
	}
}

// TestMountUnmountedAtOnce: a mount unmounted the moment it appears (before or just after its
// server answered the kernel's INIT) ends `csi-fat mount` with status 0, as any unmount does,
// and leaves the volume clean. The window is short, so it is tried many times.
func TestMountUnmountedAtOnce(t *testing.T) {
	mountTools(t)
	bin := buildCsiFat(t)
	img := mkfsImage(t, "8192")
	for i := 0; i < 25; i++ {
		dir := t.TempDir()
		cmd := exec.Command(bin, "mount", img, dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.Now().Add(10 * time.Second)
		for !isMounted(dir) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		// Detached at once, even while the server's first requests keep it busy.
		if err := exec.Command("umount", "-l", dir).Run(); err != nil {
			cmd.Process.Kill()
			t.Fatalf("try %d: umount -l %s: %v", i, dir, err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("try %d: csi-fat mount unmounted at once: %v\n%s", i, err, out.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("try %d: csi-fat mount did not exit after its unmount\n%s", i, out.String())
		}
	}
	if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil {
		t.Fatalf("fsck.fat -n after the mounts: %v\n%s", err, out)
	}
}
