package blockdev

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"
)

// TestWindowBounds: a window reads and writes at its offset on the device and refuses every
// write, writev and writeback hint that reaches outside it; bytes outside stay as they were.
func TestWindowBounds(t *testing.T) {
	const size, off, length = 1 << 20, 64 << 10, 256 << 10
	dev, err := CreateImage(filepath.Join(t.TempDir(), "w.img"), size)
	if err != nil {
		t.Fatal(err)
	}
	fill := bytes.Repeat([]byte{0xC3}, size)
	if _, err := dev.WriteAt(fill, 0); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ off, len int64 }{{-512, 1024}, {100, 1024}, {0, 1000}, {size - 512, 1024}, {0, 0}} {
		if _, err := NewWindow(dev, bad.off, bad.len); err == nil {
			t.Errorf("window of %d bytes at %d accepted", bad.len, bad.off)
		}
	}
	w, err := NewWindow(dev, off, length)
	if err != nil {
		t.Fatal(err)
	}
	if w.Size() != length || w.BlockSize() != 4096 || w.LogicalBlockSize() != 512 || w.Path() != dev.Path() {
		t.Fatalf("size %d block %d logical %d path %s", w.Size(), w.BlockSize(), w.LogicalBlockSize(), w.Path())
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"write before", func() error { _, err := w.WriteAt(make([]byte, 512), -512); return err }()},
		{"write across the end", func() error { _, err := w.WriteAt(make([]byte, 1024), length-512); return err }()},
		{"write after", func() error { _, err := w.WriteAt(make([]byte, 512), length); return err }()},
		{"writev across the end", func() error {
			_, err := w.WritevAt([][]byte{make([]byte, 512), make([]byte, 512)}, length-512)
			return err
		}()},
		{"writeback hint after", w.StartWriteback(length, 512)},
		{"read before", func() error { _, err := w.ReadAt(make([]byte, 512), -1); return err }()},
	} {
		if !errors.Is(c.err, ErrOutOfRange) {
			t.Errorf("%s: %v, want ErrOutOfRange", c.name, c.err)
		}
	}
	if n, err := w.ReadAt(make([]byte, 1024), length-512); n != 512 || err != io.EOF {
		t.Errorf("read across the end: %d, %v; want 512 bytes and EOF", n, err)
	}
	data := bytes.Repeat([]byte{0x5A}, length)
	if _, err := w.WritevAt([][]byte{data[:4096], data[4096:]}, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	if _, err := dev.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(fill)
	copy(want[off:], data)
	if !bytes.Equal(got, want) {
		t.Fatal("the device's bytes differ from the fill with the window's data at its offset")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWindowBlockSize: the window's block size is chosen from its size, as Linux chooses one for
// a partition device: the largest power of two up to the page size dividing it, at least the
// logical block size.
func TestWindowBlockSize(t *testing.T) {
	dev, err := CreateImage(filepath.Join(t.TempDir(), "w.img"), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, c := range []struct {
		off, len int64
		want     int
	}{{1 << 20, 1 << 20, 4096}, {512, 1 << 20, 4096}, {1 << 20, 1024 * 3, 1024}, {1 << 20, 512 * 7, 512}} {
		w, err := NewWindow(dev, c.off, c.len)
		if err != nil {
			t.Fatal(err)
		}
		if w.BlockSize() != c.want {
			t.Errorf("window of %d bytes at %d: block size %d, want %d", c.len, c.off, w.BlockSize(), c.want)
		}
	}
}
