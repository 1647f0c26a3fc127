package blockdev

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func sum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// wantInUse checks that err refuses the claim on path and names holder.
func wantInUse(t *testing.T, err error, path, holder string) *InUseError {
	t.Helper()
	var iu *InUseError
	if !errors.As(err, &iu) || !errors.Is(err, ErrInUse) {
		t.Fatalf("open of %s held by another writer: got %v, want an InUseError", path, err)
	}
	if iu.Path != path || !strings.Contains(iu.Holder, holder) || !strings.Contains(err.Error(), holder) {
		t.Fatalf("InUseError %q (path %q, holder %q): want path %s and holder %q", err, iu.Path, iu.Holder, path, holder)
	}
	return iu
}

// TestImageClaim: an image open for writing is refused to every other claim, in this process
// too, naming this process; a shared open beside it works and names the writer; Close lets go.
func TestImageClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vol.img")
	w, err := CreateImage(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("first writer"), 0); err != nil {
		t.Fatal(err)
	}
	before := sum(t, path)
	self := fmt.Sprintf("pid %d, %s", os.Getpid(), filepath.Base(os.Args[0]))
	for _, c := range []Claim{Exclusive, ExclusiveReadOnly} {
		_, err := OpenClaimed(path, c)
		iu := wantInUse(t, err, path, self)
		if !errors.Is(err, unix.EAGAIN) || iu.Block {
			t.Errorf("%v: %v: want EAGAIN on an image", c, err)
		}
		if !strings.Contains(err.Error(), "is in use by another writer") {
			t.Errorf("%v: %q does not say the image is in use by another writer", c, err)
		}
	}
	// Growing it is writing too: refused before the size changes.
	if _, err := CreateImage(path, 2<<20); !errors.Is(err, ErrInUse) {
		t.Fatalf("CreateImage over a held image: %v", err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 1<<20 {
		t.Fatalf("held image resized: %v %v", st.Size(), err)
	}
	if sum(t, path) != before {
		t.Fatal("refused openers changed the image")
	}

	r, err := OpenClaimed(path, Shared)
	if err != nil {
		t.Fatalf("shared open beside a writer: %v", err)
	}
	if !strings.Contains(r.Writer(), self) || !r.ReadOnly() {
		t.Errorf("shared open: Writer %q ReadOnly %v; want the writer %q named, read-only", r.Writer(), r.ReadOnly(), self)
	}
	if _, err := r.WriteAt([]byte("x"), 0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("write through a shared open: %v", err)
	}
	r.Close()

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, err := Open(path, false)
	if err != nil {
		t.Fatalf("open after the writer closed: %v", err)
	}
	if w2.Claim() != Exclusive {
		t.Errorf("Open(path, false) claim %v", w2.Claim())
	}
	r2, err := Open(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Writer() == "" {
		t.Errorf("shared open beside the second writer names none")
	}
	r2.Close()
	w2.Close()
	r3, err := Open(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if r3.Writer() != "" {
		t.Errorf("shared open with no writer names %q", r3.Writer())
	}
	r3.Close()
}

// TestImageClaimTravelsWithDescriptor: the claim is the open file description's, so a child that
// inherited the descriptor holds it after the opener closed its own, and is named as the holder.
func TestImageClaimTravelsWithDescriptor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vol.img")
	w, err := CreateImage(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{w.OSFile()}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { child.Wait(); close(exited) }()
	t.Cleanup(func() { child.Process.Kill(); <-exited })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(path, false)
	wantInUse(t, err, path, fmt.Sprintf("pid %d, sleep", child.Process.Pid))

	child.Process.Kill()
	<-exited
	w2, err := Open(path, false)
	if err != nil {
		t.Fatalf("open after the child holding the claim died: %v", err)
	}
	w2.Close()
}

// TestFromFile: a descriptor wrapped again keeps its claim and its access.
func TestFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vol.img")
	w, err := CreateImage(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(int(w.OSFile().Fd()))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	d, err := FromFile(os.NewFile(uintptr(dup), path), path, Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	if d.Size() != 1<<20 || d.ReadOnly() {
		t.Fatalf("size %d read-only %v", d.Size(), d.ReadOnly())
	}
	if _, err := d.WriteAt([]byte("through the passed descriptor"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, false); !errors.Is(err, ErrInUse) {
		t.Fatalf("claim lost when the descriptor was wrapped again: %v", err)
	}
	d.Close()
	if _, err := FromFile(mustOpen(t, t.TempDir()), "dir", Shared); !errors.Is(err, ErrNotBlockDevice) {
		t.Fatalf("FromFile of a directory: %v", err)
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestBlockDeviceClaim: a loop device open for writing holds O_EXCL: a second claim is EBUSY,
// named by the process that has it open for writing, and nothing reaches the device; a shared
// open beside it works and names the holder.
func TestBlockDeviceClaim(t *testing.T) {
	img := filepath.Join(t.TempDir(), "loop.img")
	f, err := CreateImage(img, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	dev := losetup(t, img, 0)
	w, err := Open(dev, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("first writer"), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	before := sum(t, dev)
	self := fmt.Sprintf("open for writing by pid %d", os.Getpid())
	for _, c := range []Claim{Exclusive, ExclusiveReadOnly} {
		_, err := OpenClaimed(dev, c)
		iu := wantInUse(t, err, dev, self)
		if !errors.Is(err, unix.EBUSY) || !iu.Block || !strings.Contains(err.Error(), dev+" is in use (") {
			t.Errorf("%v: %v: want EBUSY on a block device, saying it is in use", c, err)
		}
	}
	r, err := Open(dev, true)
	if err != nil {
		t.Fatalf("shared open beside a writer: %v", err)
	}
	if !strings.Contains(r.Writer(), self) {
		t.Errorf("shared open: Writer %q, want %q", r.Writer(), self)
	}
	r.Close()
	if sum(t, dev) != before {
		t.Fatal("refused openers changed the device")
	}
	// Beside the claim (a server of another partition of the same stick): it writes, and the
	// claim it stands beside still keeps every other claimant off.
	b, err := OpenClaimed(dev, Beside)
	if err != nil {
		t.Fatalf("open beside the writer's claim: %v", err)
	}
	if b.ReadOnly() {
		t.Error("Beside opened read-only")
	}
	if _, err := b.WriteAt([]byte("beside"), 4096); err != nil {
		t.Fatalf("write beside: %v", err)
	}
	if _, err := OpenClaimed(dev, Exclusive); !errors.Is(err, ErrInUse) {
		t.Errorf("Exclusive beside a claim and a Beside writer: %v, want ErrInUse", err)
	}
	got := make([]byte, 6)
	if _, err := w.ReadAt(got, 4096); err != nil || string(got) != "beside" {
		t.Errorf("the claim's holder reads %q, %v after the write beside it", got, err)
	}
	b.Close()
	w.Close()
	w2, err := Open(dev, false)
	if err != nil {
		t.Fatalf("open after the writer closed: %v", err)
	}
	w2.Close()
	r2, err := Open(dev, true)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Writer() != "" {
		t.Errorf("shared open with no writer names %q", r2.Writer())
	}
	r2.Close()
}

func TestHasOFDWriteLock(t *testing.T) {
	info := "pos:\t0\nflags:\t0100002\nmnt_id:\t30\nino:\t1234\nlock:\t1: OFDLCK ADVISORY  WRITE -1 00:2a:1234 0 EOF\n"
	if !hasOFDWriteLock(info, "1234") {
		t.Error("OFD write lock on 1234 not found")
	}
	if hasOFDWriteLock(info, "123") || hasOFDWriteLock(strings.Replace(info, "WRITE", "READ ", 1), "1234") ||
		hasOFDWriteLock(strings.Replace(info, "OFDLCK", "POSIX ", 1), "1234") {
		t.Error("matched another inode, a read lock or a POSIX lock")
	}
}
