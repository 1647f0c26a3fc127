package main

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMountRenameSIGKILL is issue 17's first part through a real mount: an fsync'ed file moved
// from new/ to cur/ while the server is SIGKILLed within a second of the mv is found under its
// new name, its old one, or both, never neither, with its bytes (judged by mtools and fsck.fat).
// After `csi-fat fsck -a`, and after a plain remount, it is under exactly the new name.
func TestMountRenameSIGKILL(t *testing.T) {
	mountTools(t, "fsck.fat", "mtype", "mdir")
	bin := buildCsiFat(t)
	for _, delay := range []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond, 900 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "md.img")
			if out, err := exec.Command(bin, "mkfs", "--size", "256M", "-F", "32", img).CombinedOutput(); err != nil {
				t.Fatalf("csi-fat mkfs: %v\n%s", err, out)
			}
			p := startMount(t, bin, img)
			for _, d := range []string{"new", "cur"} {
				if err := os.Mkdir(filepath.Join(p.dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			data := make([]byte, 1<<20)
			rand.Read(data)
			if err := os.WriteFile(filepath.Join(p.dir, "new", "msg"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"new/msg", "new", "cur", "."} {
				f, err := os.Open(filepath.Join(p.dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					t.Fatalf("fsync %s: %v", name, err)
				}
				f.Close()
			}
			if err := os.Rename(filepath.Join(p.dir, "new", "msg"), filepath.Join(p.dir, "cur", "msg")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(delay)
			p.cmd.Process.Signal(syscall.SIGKILL)
			p.wait(t)
			exec.Command("fusermount3", "-u", "-z", p.dir).Run()

			inNew, inCur := mdirHas(t, img, "::/new", "msg"), mdirHas(t, img, "::/cur", "msg")
			if !inNew && !inCur {
				_, out := fsckOutput(t, img)
				t.Fatalf("msg is in neither new/ nor cur/ after the kill:\n%s", out)
			}
			for dir, in := range map[string]bool{"new": inNew, "cur": inCur} {
				if in && mtypeFile(t, img, dir+"/msg") != string(data) {
					t.Errorf("%s/msg: its bytes differ", dir)
				}
			}
			_, out := fsckOutput(t, img)
			for _, line := range strings.Split(out, "\n") {
				if !allowedAfterCrash(line) && !(inNew && inCur && fsckOnTwoNames(line)) {
					t.Errorf("fsck.fat -n: %q\n%s", line, out)
				}
			}

			// csi-fat fsck -a on a copy, and a plain remount of the volume itself, complete it.
			repaired := filepath.Join(t.TempDir(), "repaired.img")
			if err := os.WriteFile(repaired, mustReadFile(t, img), 0o644); err != nil {
				t.Fatal(err)
			}
			// Exit 1: errors found and repaired, as fsck.fat -a.
			if out, err := exec.Command(bin, "fsck", "-a", repaired).CombinedOutput(); err != nil && cmdExit(err) != 1 {
				t.Fatalf("csi-fat fsck -a: %v\n%s", err, out)
			}
			if ok, out := fsckOutput(t, repaired); !ok {
				t.Errorf("fsck.fat -n after csi-fat fsck -a:\n%s", out)
			}
			p = startMount(t, bin, img)
			unmountAndWait(t, p)
			if strings.Contains(p.stderr.String(), "damaged") {
				t.Errorf("the remount calls the volume damaged:\n%s", p.stderr)
			}
			for _, im := range []string{repaired, img} {
				if mdirHas(t, im, "::/new", "msg") || !mdirHas(t, im, "::/cur", "msg") {
					t.Errorf("%s: msg is not under exactly its new name", filepath.Base(im))
				} else if mtypeFile(t, im, "cur/msg") != string(data) {
					t.Errorf("%s: cur/msg: its bytes differ", filepath.Base(im))
				}
			}
			_, out = fsckOutput(t, img)
			if strings.Contains(out, "share clusters") {
				t.Errorf("after the remount fsck.fat -n still sees two names:\n%s", out)
			}
		})
	}
}

// mdirHas tells whether mtools lists name in directory dir of img.
func mdirHas(t *testing.T, img, dir, name string) bool {
	t.Helper()
	cmd := exec.Command("mdir", "-b", "-i", img, dir)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mdir %s: %v\n%s", dir, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.EqualFold(filepath.Base(strings.TrimSpace(l)), name) {
			return true
		}
	}
	return false
}

// fsckOnTwoNames accepts what fsck.fat says of a file a kill left under both names of a rename:
// two files sharing clusters (it knows nothing of the mark that makes them one).
func fsckOnTwoNames(line string) bool {
	line = strings.TrimSpace(line)
	for _, ok := range []string{" and", "share clusters.", "Truncating second to 0 bytes.", "cluster chain length is 0 bytes.", "Truncating file to 0 bytes."} {
		if strings.HasSuffix(line, ok) || strings.HasPrefix(line, "/") {
			return true
		}
	}
	return false
}

// cmdExit is the exit code of a command that ran and failed, -1 for other errors.
func cmdExit(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(b)
}
