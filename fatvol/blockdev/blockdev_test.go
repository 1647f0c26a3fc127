package blockdev

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

func TestChooseBlockSize(t *testing.T) {
	const MiB = 1 << 20
	cases := []struct {
		size          int64
		logical, page int
		want          int
	}{
		{MiB, 512, 4096, 4096},
		{MiB + 512, 512, 4096, 512},
		{MiB + 1024, 512, 4096, 1024},
		{MiB + 2048, 512, 4096, 2048},
		{MiB + 4096, 512, 4096, 4096},
		{0, 512, 4096, 4096},
		{MiB, 4096, 4096, 4096},        // 4K logical: never below logical
		{MiB + 4096, 4096, 4096, 4096}, // already at page size
		{MiB, 512, 65536, 65536},       // 64K pages (arm64/ppc64)
		{MiB + 8192, 512, 65536, 8192},
		{MiB, 512, 512, 512}, // page == logical: no doubling
		{1000 * 512, 512, 4096, 4096},
		{999 * 512, 512, 4096, 512},
	}
	for _, c := range cases {
		if got := ChooseBlockSize(c.size, c.logical, c.page); got != c.want {
			t.Errorf("ChooseBlockSize(%d, %d, %d) = %d, want %d", c.size, c.logical, c.page, got, c.want)
		}
	}
}

func newImage(t *testing.T, size int64) *File {
	t.Helper()
	d, err := CreateImage(filepath.Join(t.TempDir(), "vol.img"), size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestImageBasics(t *testing.T) {
	d := newImage(t, 1<<20+1024)
	if d.Size() != 1<<20+1024 || d.LogicalBlockSize() != 512 || d.BlockSize() != 1024 {
		t.Fatalf("size %d logical %d block %d", d.Size(), d.LogicalBlockSize(), d.BlockSize())
	}
	if d.IsBlockDevice() || d.ReadOnly() {
		t.Fatal("image reported as block device or read-only")
	}
	if !strings.HasSuffix(d.Path(), "vol.img") {
		t.Fatalf("Path() = %q", d.Path())
	}
	data := bytes.Repeat([]byte("fat!"), 256)
	if n, err := d.WriteAt(data, 4096); n != len(data) || err != nil {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	got := make([]byte, len(data))
	if n, err := d.ReadAt(got, 4096); n != len(data) || err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadAt = %d, %v, equal %v", n, err, bytes.Equal(got, data))
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}

	for _, n := range []int{512, 1024, 4096, 65536} {
		if err := d.SetBlockSize(n); err != nil || d.BlockSize() != n {
			t.Errorf("SetBlockSize(%d) = %v, BlockSize %d", n, err, d.BlockSize())
		}
	}
	for _, n := range []int{0, -512, 256, 768, 3000, 131072} {
		if err := d.SetBlockSize(n); err == nil {
			t.Errorf("SetBlockSize(%d) accepted", n)
		}
	}
}

func TestWritevAt(t *testing.T) {
	d := newImage(t, 1<<20)
	bufs := [][]byte{
		bytes.Repeat([]byte{1}, 512),
		nil, // empty buffers are skipped
		bytes.Repeat([]byte{2}, 4096),
		bytes.Repeat([]byte{3}, 1000),
	}
	n, err := d.WritevAt(bufs, 8192)
	if err != nil || n != 512+4096+1000 {
		t.Fatalf("WritevAt = %d, %v", n, err)
	}
	got := make([]byte, n)
	if _, err := d.ReadAt(got, 8192); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Join(bufs, nil)) {
		t.Fatal("WritevAt data mismatch")
	}

	// More buffers than IOV_MAX still land in order.
	many := make([][]byte, 3000)
	for i := range many {
		many[i] = []byte{byte(i), byte(i >> 8)}
	}
	if n, err := d.WritevAt(many, 100000); err != nil || n != 6000 {
		t.Fatalf("WritevAt(3000 bufs) = %d, %v", n, err)
	}
	got = make([]byte, 6000)
	if _, err := d.ReadAt(got, 100000); err != nil || !bytes.Equal(got, bytes.Join(many, nil)) {
		t.Fatalf("WritevAt(3000 bufs) read back: %v", err)
	}

	// Past the end: refused, nothing written.
	if _, err := d.WritevAt([][]byte{make([]byte, 512), make([]byte, 512)}, 1<<20-512); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("WritevAt past end: %v", err)
	}
}

func TestReadPastEnd(t *testing.T) {
	d := newImage(t, 8192)
	if _, err := d.WriteAt(bytes.Repeat([]byte{7}, 8192), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if n, err := d.ReadAt(buf, 8192-1000); n != 1000 || err != io.EOF {
		t.Fatalf("straddling read = %d, %v; want 1000, io.EOF", n, err)
	}
	if n, err := d.ReadAt(buf, 8192); n != 0 || err != io.EOF {
		t.Fatalf("read at end = %d, %v", n, err)
	}
	if n, err := d.ReadAt(buf, 1<<30); n != 0 || err != io.EOF {
		t.Fatalf("read far past end = %d, %v", n, err)
	}
	if _, err := d.ReadAt(buf, -1); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("negative read: %v", err)
	}
	if n, err := d.ReadAt(buf, 4096); n != 4096 || err != nil {
		t.Fatalf("read ending exactly at end = %d, %v", n, err)
	}
}

func TestWritePastEndRefused(t *testing.T) {
	d := newImage(t, 8192)
	for _, off := range []int64{8192 - 511, 8192, 1 << 40, -512} {
		_, err := d.WriteAt(make([]byte, 512), off)
		if !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), d.Path()) {
			t.Errorf("WriteAt(512, %d) = %v, want ErrOutOfRange with path", off, err)
		}
	}
	st, _ := os.Stat(d.Path())
	if st.Size() != 8192 {
		t.Fatalf("image grew to %d", st.Size())
	}
	if _, err := d.WriteAt(make([]byte, 512), 8192-512); err != nil {
		t.Fatalf("last block write: %v", err)
	}
}

func TestReadOnly(t *testing.T) {
	p := newImage(t, 4096).Path()
	d, err := Open(p, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.WriteAt([]byte{1}, 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WriteAt read-only: %v", err)
	}
	if _, err := d.WritevAt([][]byte{{1}}, 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WritevAt read-only: %v", err)
	}
	if _, err := d.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing"), false); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := Open(dir, false); !errors.Is(err, ErrNotBlockDevice) {
		t.Fatalf("directory: %v", err)
	}
	if _, err := Open("/dev/null", false); !errors.Is(err, ErrNotBlockDevice) {
		t.Fatalf("char device: %v", err)
	}
}

func TestCreateImageSparseExtendNeverShrink(t *testing.T) {
	p := filepath.Join(t.TempDir(), "img")
	const size = 1 << 30
	d, err := CreateImage(p, size)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != size || st.Blocks*512 > 1<<20 {
		t.Fatalf("size %d, allocated %d bytes: not a sparse image", st.Size, st.Blocks*512)
	}
	if _, err := d.WriteAt([]byte("keep"), 100); err != nil {
		t.Fatal(err)
	}
	d.Close()

	// Extend: size grows, data kept.
	d, err = CreateImage(p, 2*size)
	if err != nil {
		t.Fatal(err)
	}
	if d.Size() != 2*size {
		t.Fatalf("extended size %d", d.Size())
	}
	d.Close()

	// Smaller size: never shrinks, data kept.
	d, err = CreateImage(p, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Size() != 2*size {
		t.Fatalf("CreateImage shrank the image to %d", d.Size())
	}
	got := make([]byte, 4)
	if _, err := d.ReadAt(got, 100); err != nil || string(got) != "keep" {
		t.Fatalf("data lost: %q, %v", got, err)
	}
	if _, err := CreateImage(p, -1); err == nil {
		t.Fatal("negative size accepted")
	}
}

// losetup attaches file as a loop device and detaches it at cleanup.
func losetup(t *testing.T, file string, sectorSize int) string {
	t.Helper()
	testenv.RequireLoop(t)
	bin, err := exec.LookPath("losetup")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--find", "--show"}
	if sectorSize != 0 {
		args = append(args, "--sector-size", strconv.Itoa(sectorSize))
	}
	out, err := exec.Command(bin, append(args, file)...).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %v: %v: %s", args, err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command(bin, "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

func TestLoopDevice(t *testing.T) {
	const MiB = 1 << 20
	cases := []struct {
		name          string
		size          int64
		sector        int
		logical, want int
	}{
		{"512-sector, 1MiB", MiB, 512, 512, 4096},
		{"512-sector, 1MiB+1024", MiB + 1024, 0, 512, 1024},
		{"4096-sector, 1MiB", MiB, 4096, 4096, 4096},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img, err := CreateImage(filepath.Join(t.TempDir(), "loop.img"), c.size)
			if err != nil {
				t.Fatal(err)
			}
			img.Close()
			dev := losetup(t, img.Path(), c.sector)
			d, err := Open(dev, false)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if !d.IsBlockDevice() {
				t.Fatalf("%s not detected as block device", dev)
			}
			if d.Size() != c.size || d.LogicalBlockSize() != c.logical || d.BlockSize() != c.want {
				t.Fatalf("%s: size %d logical %d block %d; want %d %d %d",
					dev, d.Size(), d.LogicalBlockSize(), d.BlockSize(), c.size, c.logical, c.want)
			}
			if err := d.SetBlockSize(c.logical / 2); err == nil {
				t.Fatalf("SetBlockSize(%d) below logical %d accepted", c.logical/2, c.logical)
			}

			// Real I/O through the block device: writev, flush, read back, bounds.
			bufs := [][]byte{bytes.Repeat([]byte{0xAA}, c.logical), bytes.Repeat([]byte{0x55}, c.logical)}
			if n, err := d.WritevAt(bufs, int64(c.logical)); err != nil || n != 2*c.logical {
				t.Fatalf("WritevAt = %d, %v", n, err)
			}
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 2*c.logical)
			if _, err := d.ReadAt(got, int64(c.logical)); err != nil || !bytes.Equal(got, bytes.Join(bufs, nil)) {
				t.Fatalf("read back: %v", err)
			}
			if _, err := d.WriteAt(make([]byte, c.logical), c.size); !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("write past end of block device: %v", err)
			}
			if n, err := d.ReadAt(make([]byte, 4096), c.size); n != 0 || err != io.EOF {
				t.Fatalf("read past end of block device = %d, %v", n, err)
			}
		})
	}
}

func TestStartWriteback(t *testing.T) {
	d := newImage(t, 1<<20)
	if _, err := d.WriteAt(make([]byte, 65536), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.StartWriteback(0, 65536); err != nil {
		t.Fatalf("StartWriteback: %v", err)
	}
	if err := d.StartWriteback(0, 0); err != nil {
		t.Fatalf("StartWriteback of nothing: %v", err)
	}
	// Through the wrappers too: they embed the Device.
	if err := NewCounting(NewFaulty(d)).StartWriteback(0, 4096); err != nil {
		t.Fatal(err)
	}
}
