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
	p.waitFor(t, "Stop with Ctrl-C")
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
	if !strings.Contains(p.out.String(), "deletes the volume") || !strings.Contains(p.out.String(), "CreateVolume made") {
		t.Errorf("a plain run should say it made the volume and will delete it; output:\n%s", p.out.String())
	}
	if isMounted(volume) || isMounted(filepath.Join(dir, "staging")) {
		t.Errorf("mounts left after the demo ended")
	}
	if _, err := os.Stat(images[0]); !os.IsNotExist(err) {
		t.Errorf("the demo's image %s is still there after it ended: %v", images[0], err)
	}
	// Nothing of the demo's is left: not its log, pool, staging path, state or socket.
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("%s holds %v after the demo ended (%v), want nothing", dir, left, err)
	}
}

// TestDemoKeep keeps the image: what was written through the mount is on it, as fsck.fat and
// mtools read it, and a second run serves the same volume again.
func TestDemoKeep(t *testing.T) {
	requireRootFUSE(t)
	bin := buildCsiFat(t)
	dir := t.TempDir()
	p := startDemo(t, bin, dir, "--keep", "--size", "40M", "--mode", "sync")
	if !strings.Contains(p.out.String(), "keeps the volume (--keep)") {
		t.Errorf("with --keep the banner should say the volume is kept; output:\n%s", p.out.String())
	}
	want := "kept across runs\n"
	if err := os.WriteFile(filepath.Join(dir, "volume", "kept.txt"), []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	hello := "the user's own HELLO.TXT\n"
	if err := os.WriteFile(filepath.Join(dir, "volume", "HELLO.TXT"), []byte(hello), 0o644); err != nil {
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
	// A plain run finds the kept volume and serves it as it is, with its own size and mode:
	// it says so, leaves the files alone and keeps the volume at the end.
	p = startDemo(t, bin, dir)
	if out := p.out.String(); !strings.Contains(out, "kept by an earlier run") || strings.Contains(out, "CreateVolume made") ||
		!strings.Contains(out, "keeps the volume (an earlier run kept it)") {
		t.Errorf("the second run should say it serves the kept volume again and keeps it; output:\n%s", out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "volume", "kept.txt"))
	if err != nil || string(got) != want {
		t.Fatalf("second run reads kept.txt = %q, %v; want %q", got, err, want)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "volume", "HELLO.TXT")); err != nil || string(got) != hello {
		t.Errorf("second run's HELLO.TXT = %q, %v; want the user's %q left as it was", got, err, hello)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("second demo exited %d; output:\n%s", code, p.out.String())
	}
	if got := mtypeFile(t, images[0], "kept.txt"); got != want {
		t.Fatalf("after the second run, mtype kept.txt = %q, want %q", got, want)
	}
	// The kept log, of both runs: the driver's log names the volume by one ID, its full one, wherever it names it.
	log, err := os.ReadFile(filepath.Join(dir, "driver.log"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), `volume="demo-volume"`) || !strings.Contains(string(log), `volume="image:demo-node:demo-volume"`) {
		t.Errorf("the driver's log should name the volume only by its ID image:demo-node:demo-volume:\n%s", log)
	}
	// Asked for another size, it refuses and says why, touching nothing.
	before := sha256File(t, images[0])
	out, err := exec.Command(bin, "demo", "--dir", dir, "--size", "50M").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "earlier --keep run") {
		t.Errorf("demo --size 50M over a kept 40M volume: %v, %s; want an error naming the kept volume", err, out)
	}
	if sha256File(t, images[0]) != before {
		t.Errorf("the refused run changed the kept image")
	}
	for _, mp := range []string{"volume", "staging"} {
		if isMounted(filepath.Join(dir, mp)) {
			t.Errorf("%s is mounted after the refused run", mp)
		}
	}
}
