package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// demoProcess is `csi-fat demo` running for a test, its standard output read line by line.
type demoProcess struct {
	cmd   *exec.Cmd
	lines chan string
	out   strings.Builder
}

// startDemo runs the demo and waits for it to say the volume is ready. Cleanup kills it if it
// still runs and detaches anything left mounted under dir.
func startDemo(t *testing.T, bin, dir string, args ...string) *demoProcess {
	t.Helper()
	p := &demoProcess{lines: make(chan string, 100)}
	p.cmd = exec.Command(bin, append([]string{"demo", "--dir", dir}, args...)...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		for _, mp := range []string{filepath.Join(dir, "volume"), filepath.Join(dir, "staging")} {
			if isMounted(mp) {
				t.Errorf("%s is still mounted after the test", mp)
				syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
		close(p.lines)
	}()
	p.waitFor(t, "The volume is ready")
	return p
}

// waitFor reads output until a line holds want.
func (p *demoProcess) waitFor(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("demo ended before saying %q; output:\n%s", want, p.out.String())
			}
			p.out.WriteString(line + "\n")
			if strings.Contains(line, want) {
				return
			}
		case <-timeout:
			t.Fatalf("demo did not say %q within a minute; output:\n%s", want, p.out.String())
		}
	}
}

// stop interrupts the demo as Ctrl-C does and returns its exit code.
func (p *demoProcess) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for line := range p.lines {
		p.out.WriteString(line + "\n")
	}
	err := p.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

func requireRootFUSE(t *testing.T) {
	t.Helper()
	mountTools(t, "fsck.fat", "mtype")
	testenv.RequireRoot(t, "the demo's FUSE and bind mounts")
}

// TestDemo runs the README's main job: the volume shows up as a directory a user can list and
// write, and Ctrl-C takes everything down and deletes the volume.
func TestDemo(t *testing.T) {
	requireRootFUSE(t)
	bin := buildCsiFat(t)
	dir := t.TempDir()
	p := startDemo(t, bin, dir)
	volume := filepath.Join(dir, "volume")
	if !isMounted(volume) || !isMounted(filepath.Join(dir, "staging")) {
		t.Fatalf("the demo says ready but %s or the staging path is not mounted", volume)
	}
	out, err := exec.Command("ls", volume).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "HELLO.TXT" {
		t.Fatalf("ls %s: %v: %q, want HELLO.TXT", volume, err, out)
	}
	if err := os.WriteFile(filepath.Join(volume, "notes.txt"), []byte("written by the test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	images, _ := filepath.Glob(filepath.Join(dir, "pool", "*.img"))
	if len(images) != 1 {
		t.Fatalf("pool holds %v, want one image", images)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("demo exited %d after SIGINT; output:\n%s", code, p.out.String())
	}
	if isMounted(volume) || isMounted(filepath.Join(dir, "staging")) {
		t.Errorf("mounts left after the demo ended")
	}
	if _, err := os.Stat(images[0]); !os.IsNotExist(err) {
		t.Errorf("the demo's image %s is still there after it ended: %v", images[0], err)
	}
	if _, err := os.Stat(volume); !os.IsNotExist(err) {
		t.Errorf("the target directory %s is still there: %v", volume, err)
	}
}

// TestDemoKeep keeps the image: what was written through the mount is on it, as fsck.fat and
// mtools read it, and a second run serves the same volume again.
func TestDemoKeep(t *testing.T) {
	requireRootFUSE(t)
	bin := buildCsiFat(t)
	dir := t.TempDir()
	p := startDemo(t, bin, dir, "--keep", "--size", "40M", "--mode", "sync")
	want := "kept across runs\n"
	if err := os.WriteFile(filepath.Join(dir, "volume", "kept.txt"), []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("demo exited %d; output:\n%s", code, p.out.String())
	}
	images, _ := filepath.Glob(filepath.Join(dir, "pool", "*.img"))
	if len(images) != 1 {
		t.Fatalf("pool holds %v, want the kept image", images)
	}
	if clean, out := fsckOutput(t, images[0]); !clean {
		t.Fatalf("fsck.fat -n on the kept image:\n%s", out)
	}
	if got := mtypeFile(t, images[0], "kept.txt"); got != want {
		t.Fatalf("mtype kept.txt = %q, want %q", got, want)
	}
	if out, err := exec.Command("mlabel", "-s", "-i", images[0], "::").CombinedOutput(); err != nil || !strings.Contains(string(out), "CSIFATDEMO") {
		t.Errorf("mlabel -s: %v: %s; want the label CSIFATDEMO", err, out)
	}
	p = startDemo(t, bin, dir, "--keep", "--size", "40M", "--mode", "sync")
	got, err := os.ReadFile(filepath.Join(dir, "volume", "kept.txt"))
	if err != nil || string(got) != want {
		t.Fatalf("second run reads kept.txt = %q, %v; want %q", got, err, want)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("second demo exited %d; output:\n%s", code, p.out.String())
	}
}
