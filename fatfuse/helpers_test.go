package fatfuse

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/internal/judge"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// needTools skips the test unless FUSE and the named programs are available.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	testenv.RequireFUSE(t)
	testenv.RequireTool(t, tools...)
}

// makeImage formats a new image with mkfs.fat and returns its path.
func makeImage(t *testing.T, sizeKiB int, mkfsArgs ...string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "vol.img")
	args := append(append([]string{"-C"}, mkfsArgs...), img, strconv.Itoa(sizeKiB))
	if out, err := exec.Command("mkfs.fat", args...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat %v: %v\n%s", args, err, out)
	}
	return img
}

// mounted is a volume served in this process for a test.
type mounted struct {
	img string
	dir string
	vol *fatvol.Volume
	srv *Server
	t   *testing.T
	up  bool
}

// mountImage opens img and mounts it with the given -o string; cleanup unmounts (lazily if it
// must) and closes the volume, so no stale mount outlives the test.
func mountImage(t *testing.T, img, optString string) *mounted {
	t.Helper()
	opts, err := mountopt.ParseOptions(optString)
	if err != nil {
		t.Fatalf("ParseOptions(%q): %v", optString, err)
	}
	vol, err := fatvol.OpenImage(img, VolumeOptions(opts))
	if err != nil {
		t.Fatalf("open %s: %v", img, err)
	}
	dir := t.TempDir()
	srv, err := Mount(vol, dir, opts)
	if err != nil {
		vol.Close()
		t.Fatalf("mount: %v", err)
	}
	m := &mounted{img: img, dir: dir, vol: vol, srv: srv, t: t, up: true}
	t.Cleanup(func() {
		if m.up {
			m.unmount()
		}
	})
	return m
}

// unmount unmounts, waits for the server to finish, and closes the volume (writing it back and
// clearing the dirty bit).
func (m *mounted) unmount() {
	m.t.Helper()
	m.up = false
	if err := m.srv.Unmount(); err != nil {
		m.t.Errorf("unmount: %v; detaching", err)
		exec.Command("fusermount3", "-u", "-z", m.dir).Run()
	}
	done := make(chan struct{})
	go func() { m.srv.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		m.t.Errorf("server did not finish after unmount")
	}
	if err := m.vol.Close(); err != nil {
		m.t.Errorf("close volume: %v", err)
	}
}

func (m *mounted) path(name string) string { return filepath.Join(m.dir, name) }

// fsckClean runs fsck.fat -n and fails the test unless it reports a clean volume.
func fsckClean(t *testing.T, img string) {
	t.Helper()
	if err := judge.Check(img); err != nil {
		t.Error(err)
	}
}

// errnoOf names the errno inside err ("ok" for nil), for comparing outcomes across file systems.
func errnoOf(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e.Error()
	}
	return err.Error()
}
