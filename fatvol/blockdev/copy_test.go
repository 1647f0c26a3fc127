package blockdev

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sparseSource makes a file of size bytes with data at a few places, holes between, and a
// written block of zeros, and returns it with its content.
func sparseSource(t *testing.T, size int64) (*os.File, []byte) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "src.img"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	r := rand.New(rand.NewSource(1))
	for _, at := range []struct{ off, n int64 }{{0, 4096}, {1 << 20, 3 << 20}, {5<<20 + 512, 1000}, {size - 8192, 8192}} {
		b := want[at.off : at.off+at.n]
		r.Read(b)
		if _, err := f.WriteAt(b, at.off); err != nil {
			t.Fatal(err)
		}
	}
	// Written zeros: data to SEEK_DATA, a hole to the copy.
	if _, err := f.WriteAt(make([]byte, 1<<20), 8<<20); err != nil {
		t.Fatal(err)
	}
	return f, want
}

func allocated(t *testing.T, f *os.File) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestCopyImageSparse: a copy into a file has the source's bytes and takes room only for its
// blocks that are not zeros (this pool is no reflink file system: the sparse copy runs; on one
// that is, the reflink is taken); a budget too small for it fails it, as does a deadline passed.
func TestCopyImageSparse(t *testing.T) {
	const size = 16 << 20
	src, want := sparseSource(t, size)
	dst, err := os.Create(filepath.Join(t.TempDir(), "dst.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	res, err := CopyImage(dst, src, size, CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	if n, err := dst.ReadAt(got, 0); n != size || err != nil {
		t.Fatalf("read the copy: %d, %v", n, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the copy differs from the source")
	}
	if !res.Reflinked {
		data := int64(4096 + 3<<20 + 1000 + 8192)
		if res.Written < data || res.Written > data+2*4096 {
			t.Errorf("wrote %d bytes; the source holds %d bytes that are not zeros", res.Written, data)
		}
		if a := allocated(t, dst); a > data+64<<10 {
			t.Errorf("the copy takes %d bytes; the source holds %d that are not zeros", a, data)
		}
	}

	small, err := os.Create(filepath.Join(t.TempDir(), "small.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if _, err := sparseCopy(small, src, size, CopyOptions{Budget: 1 << 20}); !errors.Is(err, ErrBudget) {
		t.Errorf("a copy of 3 MiB with a budget of 1 MiB = %v, want ErrBudget", err)
	}
	if _, err := sparseCopy(small, src, size, CopyOptions{Deadline: time.Now().Add(-time.Second)}); !errors.Is(err, ErrDeadline) {
		t.Errorf("a copy past its deadline = %v, want ErrDeadline", err)
	}
}

// TestCopyImageOntoDevice: a copy onto a block device (a loop device full of junk) leaves every
// byte the source's, zeros where the source has holes.
func TestCopyImageOntoDevice(t *testing.T) {
	const size = 16 << 20
	src, want := sparseSource(t, size)
	back := filepath.Join(t.TempDir(), "stick")
	junk := bytes.Repeat([]byte{0xA5}, size+1<<20)
	if err := os.WriteFile(back, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	loop := losetup(t, back, 512)
	dev, err := os.OpenFile(loop, os.O_RDWR|unix.O_EXCL, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := CopyImage(dev, src, size, CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size+1<<20)
	if _, err := dev.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:size], want) {
		t.Fatal("the device differs from the source")
	}
	if !bytes.Equal(got[size:], junk[size:]) {
		t.Error("the copy wrote past the source's size")
	}
}
