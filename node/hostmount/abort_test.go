package hostmount

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestAbortFUSE: a FUSE mount whose connection someone holds and nobody serves makes a request
// wait; AbortFUSE ends that wait with an error while the descriptor is still held, and later
// requests fail at once.
func TestAbortFUSE(t *testing.T) {
	testenv.RequireRoot(t, "FUSE mounts")
	testenv.RequireFUSE(t)
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts, err := mountopt.ParseOptions("")
	if err != nil {
		t.Fatal(err)
	}
	f, err := MountFUSE("abort-test", dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // held throughout: only the abort can end the connection
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(dir, "x"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a request to an unserved connection did not wait: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := NewTable().AbortFUSE(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the waiting request succeeded after the abort")
		}
		t.Logf("the waiting request: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting request still waits 5 s after the abort")
	}
	if _, err := os.ReadDir(dir); err == nil {
		t.Fatal("a request after the abort succeeded")
	}
	if err := NewTable().AbortFUSE(t.TempDir()); err == nil {
		t.Fatal("AbortFUSE of a directory with no FUSE mount succeeded")
	}
}
