package blockdev

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pages splits n bytes of a seeded pattern into page-sized buffers, as the engine's cache
// hands a batch to WritevAt.
func pages(seed uint64, n, page int) ([][]byte, []byte) {
	data := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	var bufs [][]byte
	for off := 0; off < n; off += page {
		bufs = append(bufs, data[off:min(off+page, n)])
	}
	return bufs, data
}

func directWrites(d *File) int64 {
	d.directMu.Lock()
	defer d.directMu.Unlock()
	if d.direct == nil {
		return -1
	}
	return d.direct.writes.Load()
}

func readBack(t *testing.T, d *File, off int64, n int) []byte {
	t.Helper()
	got := make([]byte, n)
	if _, err := d.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	return got
}

// directMedia are the media the direct I/O tests run on: an image file and loop devices of
// 512-byte and of 4 KiB sectors (where 512-aligned I/O is not aligned enough and must fall back).
var directMedia = []struct {
	name   string
	sector int // 0: the image file itself
}{{"image", 0}, {"loop512", 512}, {"loop4096", 4096}}

// directMedium makes a medium of size bytes (a loop device of sector-byte sectors over an image
// file, or the image itself for 0), opened for writing with its direct twin attached; it is closed
// when the test ends.
func directMedium(t *testing.T, size int64, sector int) (*File, string) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "dev.img")
	f, err := CreateImage(img, size)
	if err != nil {
		t.Fatal(err)
	}
	path := img
	if sector != 0 {
		f.Close()
		path = losetup(t, img, sector)
		if f, err = Open(path, false); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { f.Close() })
	if err := f.OpenDirect(); err != nil {
		t.Fatalf("OpenDirect on %s: %v", path, err)
	}
	return f, path
}

// TestDirectWrites: large aligned batches go through the O_DIRECT twin, everything else through
// the page cache, and reads (buffered) see whichever was written last: the kernel keeps the two
// coherent. On an image file and on a loop device of 512-byte and of 4 KiB sectors (where a
// 512-aligned batch is not aligned enough and must fall back).
func TestDirectWrites(t *testing.T) {
	const size = 32 << 20
	for _, tc := range directMedia {
		t.Run(tc.name, func(t *testing.T) {
			f, path := directMedium(t, size, tc.sector)
			if !f.DirectWrites() {
				t.Fatal("DirectWrites false after OpenDirect")
			}

			// A small buffered write first, then a large batch over it: the batch wins.
			if _, err := f.WriteAt(bytes.Repeat([]byte{0xAA}, 4096), 1<<20); err != nil {
				t.Fatal(err)
			}
			bufs, want := pages(1, 6<<20+4096, 4096) // more than one direct chunk, not a multiple of it
			if n, err := f.WritevAt(bufs, 1<<20); err != nil || n != len(want) {
				t.Fatalf("WritevAt = %d, %v", n, err)
			}
			if w := directWrites(f); w < 2 {
				t.Fatalf("%d direct writes for 6 MiB at an aligned offset, want at least 2", w)
			}
			if got := readBack(t, f, 1<<20, len(want)); !bytes.Equal(got, want) {
				t.Fatal("read after a direct batch differs from what was written")
			}

			// A buffered write inside the direct extent, then read: the later write shows.
			if _, err := f.WriteAt([]byte("buffered after direct"), 2<<20+100); err != nil {
				t.Fatal(err)
			}
			copy(want[1<<20+100:], "buffered after direct")
			if got := readBack(t, f, 1<<20, len(want)); !bytes.Equal(got, want) {
				t.Fatal("a buffered write after a direct batch is not seen")
			}

			// Small and unaligned batches fall back to the page cache, with the same result.
			before := directWrites(f)
			small, wantSmall := pages(2, 64<<10, 4096)
			if _, err := f.WritevAt(small, 16<<20); err != nil {
				t.Fatal(err)
			}
			odd, wantOdd := pages(3, 1<<20, 4096)
			if _, err := f.WritevAt(odd, 20<<20+512); err != nil {
				t.Fatal(err)
			}
			after := directWrites(f)
			switch {
			case tc.sector == 4096 || tc.sector == 0 && directAlign(t, f) > 512:
				if after != before {
					t.Errorf("direct writes %d -> %d: an offset not aligned for direct I/O went direct", before, after)
				}
			case after != before+1:
				t.Errorf("direct writes %d -> %d, want one more (the 1 MiB batch at a 512-byte boundary)", before, after)
			}
			if got := readBack(t, f, 16<<20, len(wantSmall)); !bytes.Equal(got, wantSmall) {
				t.Fatal("small batch read back differs")
			}
			if got := readBack(t, f, 20<<20+512, len(wantOdd)); !bytes.Equal(got, wantOdd) {
				t.Fatal("unaligned batch read back differs")
			}
			if err := f.Flush(); err != nil {
				t.Fatal(err)
			}

			// What a fresh descriptor reads from the medium is what was written.
			fresh, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fresh[1<<20:1<<20+len(want)], want) {
				t.Fatal("the medium, read by a new descriptor, differs")
			}
		})
	}
}

func directAlign(t *testing.T, d *File) int64 {
	t.Helper()
	d.directMu.Lock()
	defer d.directMu.Unlock()
	return d.direct.align
}

// TestAttachDirectRefuses: a twin that is of another file, or not O_DIRECT, or a read-only
// File, is refused with a reason and closed; the File goes on through the page cache.
func TestAttachDirectRefuses(t *testing.T) {
	dir := t.TempDir()
	a, err := CreateImage(filepath.Join(dir, "a.img"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := CreateImage(filepath.Join(dir, "b.img"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	other, err := OpenDirectTwin(b.OSFile(), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AttachDirect(other); err == nil || !strings.Contains(err.Error(), "another file") {
		t.Errorf("AttachDirect(twin of b) = %v", err)
	}
	plain, err := os.OpenFile(filepath.Join(dir, "a.img"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AttachDirect(plain); err == nil || !strings.Contains(err.Error(), "O_DIRECT") {
		t.Errorf("AttachDirect(no O_DIRECT) = %v", err)
	}
	if a.DirectWrites() {
		t.Error("DirectWrites after refused twins")
	}
	ro, err := OpenClaimed(filepath.Join(dir, "b.img"), Shared)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	// A read-only File takes a twin for reading alone, and no other.
	rw, err := OpenDirectTwin(ro.OSFile(), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.AttachDirect(rw); err == nil || !strings.Contains(err.Error(), "for reading only") {
		t.Errorf("AttachDirect(a twin for writing) to a read-only File = %v", err)
	}
	if err := ro.OpenDirect(); err != nil || ro.DirectWrites() || !ro.DirectReads() {
		t.Errorf("OpenDirect on a read-only File = %v, DirectWrites %v, DirectReads %v; want reads alone", err, ro.DirectWrites(), ro.DirectReads())
	}
	// A File open for writing takes no twin for reading alone.
	rdonly, err := OpenDirectTwin(a.OSFile(), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AttachDirect(rdonly); err == nil || !strings.Contains(err.Error(), "not open for writing") {
		t.Errorf("AttachDirect(a twin for reading) to a File open for writing = %v", err)
	}
	bufs, want := pages(4, 1<<20, 4096)
	if _, err := a.WritevAt(bufs, 0); err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, a, 0, len(want)); !bytes.Equal(got, want) {
		t.Fatal("page-cache write after refused twins differs")
	}
}

func directReads(d *File) int64 {
	d.directMu.Lock()
	defer d.directMu.Unlock()
	if d.direct == nil {
		return -1
	}
	return d.direct.reads.Load()
}

// alignedBuf is n bytes at a page boundary, as go-fuse's reply buffers are.
func alignedBuf(n int) []byte {
	b := make([]byte, n+65536)
	skip := (4096 - int(uintptr(unsafe.Pointer(&b[0]))%4096)) % 4096
	return b[skip : skip+n : skip+n]
}

// TestDirectReads: large aligned reads go through the twin, small or unaligned ones through the
// page cache, and every read sees the last write whichever way it went: data still dirty in the
// device's page cache (a buffered write not yet written back), a direct batch, a buffered write
// over it. A twin open for writing only (what a plugin without direct reads hands over) leaves
// reads buffered. On an image file and on loop devices of 512-byte and 4 KiB sectors.
func TestDirectReads(t *testing.T) {
	const size = 16 << 20
	for _, tc := range directMedia {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := directMedium(t, size, tc.sector)
			read := func(off int64, n int) []byte {
				t.Helper()
				p := alignedBuf(n)
				if _, err := f.ReadAt(p, off); err != nil {
					t.Fatalf("read %d at %d: %v", n, off, err)
				}
				return p
			}

			// Buffered, still dirty in the device's page cache: a direct read must see it.
			bufs, want := pages(5, 1<<20, 4096)
			for i, b := range bufs {
				if _, err := f.WriteAt(b, 2<<20+int64(i*4096)); err != nil {
					t.Fatal(err)
				}
			}
			before := directReads(f)
			if got := read(2<<20, 1<<20); !bytes.Equal(got, want) {
				t.Fatal("a direct read does not see buffered writes not yet written back")
			}
			if directReads(f) == before {
				t.Fatal("a 1 MiB aligned read did not go direct")
			}

			// A direct batch, then a buffered write inside it: reads see both.
			batch, want2 := pages(6, 2<<20, 4096)
			if _, err := f.WritevAt(batch, 4<<20); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("later, buffered"), 5<<20+4096); err != nil {
				t.Fatal(err)
			}
			copy(want2[1<<20+4096:], "later, buffered")
			if got := read(4<<20, 2<<20); !bytes.Equal(got, want2) {
				t.Fatal("a direct read after a direct batch and a buffered write differs")
			}

			// Small, unaligned in the device, unaligned in memory: buffered, same bytes.
			before = directReads(f)
			if got := read(4<<20, 4096); !bytes.Equal(got, want2[:4096]) {
				t.Fatal("small read differs")
			}
			odd := alignedBuf(256<<10 + 512)[512:]
			if _, err := f.ReadAt(odd, 4<<20+512); err != nil || !bytes.Equal(odd, want2[512:512+256<<10]) {
				t.Fatalf("read into memory off a page boundary: %v, or bytes differ", err)
			}
			unaligned := alignedBuf(256 << 10)
			if _, err := f.ReadAt(unaligned, 4<<20+100); err != nil || !bytes.Equal(unaligned, want2[100:100+256<<10]) {
				t.Fatalf("read at an unaligned offset: %v, or bytes differ", err)
			}
			after := directReads(f)
			if tc.sector == 4096 || tc.sector == 0 && directAlign(t, f) > 512 {
				if after != before {
					t.Errorf("direct reads %d -> %d for reads not aligned enough", before, after)
				}
			} else if after != before+1 {
				// The read into memory 512 bytes past a page boundary is aligned enough here.
				t.Errorf("direct reads %d -> %d, want one more (the 512-aligned read)", before, after)
			}
			// The file's last bytes, a read running past the end: short, EOF, buffered.
			tail := alignedBuf(128 << 10)
			if n, err := f.ReadAt(tail, size-64<<10); n != 64<<10 || err != io.EOF {
				t.Errorf("read past the end = %d, %v; want %d, EOF", n, err, 64<<10)
			}
		})
	}

	t.Run("read-only", func(t *testing.T) {
		img := filepath.Join(t.TempDir(), "dev.img")
		f, err := CreateImage(img, size)
		if err != nil {
			t.Fatal(err)
		}
		bufs, want := pages(8, 1<<20, 4096)
		if _, err := f.WritevAt(bufs, 3<<20); err != nil {
			t.Fatal(err)
		}
		f.Close()
		ro, err := OpenClaimed(img, ExclusiveReadOnly)
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		if err := ro.OpenDirect(); err != nil || !ro.DirectReads() || ro.DirectWrites() {
			t.Fatalf("OpenDirect = %v, DirectReads %v, DirectWrites %v", err, ro.DirectReads(), ro.DirectWrites())
		}
		p := alignedBuf(1 << 20)
		if _, err := ro.ReadAt(p, 3<<20); err != nil || !bytes.Equal(p, want) {
			t.Fatalf("read: %v, or bytes differ", err)
		}
		if r := directReads(ro); r < 1 {
			t.Error("a 1 MiB aligned read of a read-only File did not go direct")
		}
	})

	t.Run("write-only twin", func(t *testing.T) {
		img := filepath.Join(t.TempDir(), "dev.img")
		f, err := CreateImage(img, size)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		twin, err := os.OpenFile(img, os.O_WRONLY|unix.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.AttachDirect(twin); err != nil {
			t.Fatalf("AttachDirect(write-only twin) = %v", err)
		}
		bufs, want := pages(7, 1<<20, 4096)
		if _, err := f.WritevAt(bufs, 1<<20); err != nil {
			t.Fatal(err)
		}
		p := alignedBuf(1 << 20)
		if _, err := f.ReadAt(p, 1<<20); err != nil || !bytes.Equal(p, want) {
			t.Fatalf("read: %v, or bytes differ", err)
		}
		if r := directReads(f); r != 0 {
			t.Errorf("%d direct reads through a twin open for writing only", r)
		}
		if directWrites(f) == 0 {
			t.Error("no direct write through the write-only twin")
		}
	})
}
