package fatvol

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/internal/judge"
)

// These tests check the write-back behaviours through the counting device: what reaches the
// device, in how many requests, and when.

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// mkfsImage formats a sparse image of size bytes with mkfs.fat and the given options.
func mkfsImage(t *testing.T, size string, args ...string) string {
	t.Helper()
	img := t.TempDir() + "/v.img"
	if out, err := exec.Command("truncate", "-s", size, img).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v: %s", err, out)
	}
	if out, err := exec.Command("mkfs.fat", append(args, img)...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat: %v: %s", err, out)
	}
	return img
}

// openCounting opens img behind a counting device.
func openCounting(t *testing.T, img string, opts Options) (*Volume, *blockdev.Counting) {
	t.Helper()
	f, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	c := blockdev.NewCounting(f)
	opts.Logger = quietLogger()
	v, err := Open(c, opts)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	return v, c
}

// judgeClean fails the test unless fsck.fat -n and the project's checker both find nothing but
// the kinds ignored.
func judgeClean(t *testing.T, img string, ignore ...fsck.Kind) {
	t.Helper()
	if err := judge.Check(img, ignore...); err != nil {
		t.Error(err)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

// A sequential copy goes out in requests of several MiB, not one per write call.
func TestWritebackCoalesces(t *testing.T) {
	img := mkfsImage(t, "256M", "-F", "32")
	v, c := openCounting(t, img, Options{})
	f, err := v.Create("big.bin")
	if err != nil {
		t.Fatal(err)
	}
	chunk := pattern(128<<10, 1)
	for range 256 { // 32 MiB
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Stats()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// 32 MiB of data in requests of MaxRequest (8 MiB), plus the metadata: the dirty bit, two
	// FAT copies, the directory sector and FSINFO.
	s := c.Stats()
	if s.Writes > 32/8+6 {
		t.Errorf("%d write requests for a 32 MiB copy, want at most %d (stats: %v)", s.Writes, 32/8+6, s)
	}
	// Two flushes: data and chain durable before the entry that points at them, then the entry.
	if d := s.Sub(before); d.Flushes != 2 {
		t.Errorf("fsync issued %d device flushes, want 2", d.Flushes)
	}
	f.Close()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	judgeClean(t, img)
}

// startCounter counts the requests to start device writeback.
type startCounter struct {
	blockdev.Device
	starts int
}

func (d *startCounter) StartWriteback(off, length int64) error {
	d.starts++
	return d.Device.StartWriteback(off, length)
}

// Small files written one after another leave together: their ends are padded to whole pages
// at close, so the clusters of a 4 KiB-cluster volume make one request, and the medium is asked
// to start writing once per span, not once per file. A file appended to after the padding keeps
// exactly what was written.
func TestSmallFilesLeaveTogether(t *testing.T) {
	img := mkfsImage(t, "512M", "-F", "32", "-s", "8")
	f, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	c := blockdev.NewCounting(f)
	sc := &startCounter{Device: c}
	v, err := Open(sc, Options{Logger: quietLogger()})
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	const files = 300
	want := map[string][]byte{}
	for i := range files {
		name := fmt.Sprintf("f%03d.txt", i)
		want[name] = pattern(100+i*7, byte(i))
		fh, err := v.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.Write(want[name]); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
	}
	fh, err := v.OpenFile("f000.txt", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	more := pattern(50, 0xee)
	if _, err := fh.Write(more); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	want["f000.txt"] = append(want["f000.txt"], more...)

	before := c.Stats()
	sc.starts = 0
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	// The data clusters run on with a break where the root directory grew; then the FAT (two
	// copies), the directory and FSINFO. One request a file would be 300.
	if d := c.Stats().Sub(before); d.Writes > 16 {
		t.Errorf("%d write requests for %d small files, want at most 16 (stats: %v)", d.Writes, files, d)
	}
	if sc.starts > 4 {
		t.Errorf("writeback started %d times for %d small files, want at most 4", sc.starts, files)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	judgeClean(t, img)
	ro, err := OpenImage(img, Options{ReadOnly: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for name, w := range want {
		got, err := readAll(ro, name)
		if err != nil || !bytes.Equal(got, w) {
			t.Fatalf("%s after reopen: err %v, %d bytes, want %d, equal %v", name, err, len(got), len(w), bytes.Equal(got, w))
		}
	}
}

// Dirty data never grows past the bound: a writer past it writes back first.
func TestWritebackBound(t *testing.T) {
	img := mkfsImage(t, "256M", "-F", "32")
	const bound = 1 << 20
	v, c := openCounting(t, img, Options{CacheBytes: bound})
	f, err := v.Create("big.bin")
	if err != nil {
		t.Fatal(err)
	}
	chunk := pattern(64<<10, 2)
	for i := range 128 { // 8 MiB
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
		v.mu.Lock()
		dirty := v.cache.dirtyBytes()
		v.mu.Unlock()
		if dirty > bound {
			t.Fatalf("after write %d: %d bytes dirty, bound %d", i, dirty, bound)
		}
	}
	if w := c.Stats().BytesWritten; w < 6<<20 {
		t.Errorf("only %d bytes reached the device while writing 8 MiB with a 1 MiB bound", w)
	}
	f.Close()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	judgeClean(t, img)
}

// Data and metadata older than DirtyExpire are written back without anyone asking.
func TestWritebackExpires(t *testing.T) {
	img := mkfsImage(t, "64M")
	v, c := openCounting(t, img, Options{DirtyExpire: 20 * time.Millisecond})
	defer v.Close()
	f, err := v.Create("a.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(pattern(5000, 3)); err != nil {
		t.Fatal(err)
	}
	start := c.Stats()
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Sub(start).BytesWritten < 5000 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing written back 10 s after the dirty data expired: %v", c.Stats().Sub(start))
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.Close()
}

// With flush, closing a file writes its data at once; without, it stays dirty.
func TestFlushOnClose(t *testing.T) {
	for _, flush := range []bool{false, true} {
		img := mkfsImage(t, "64M")
		v, c := openCounting(t, img, Options{Flush: flush})
		f, err := v.Create("a.bin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(pattern(4<<20, 4)); err != nil {
			t.Fatal(err)
		}
		before := c.Stats()
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		written := c.Stats().Sub(before).BytesWritten
		if flush && written < 4<<20 {
			t.Errorf("flush: close wrote %d bytes, want the file's 4 MiB", written)
		}
		if !flush && written != 0 {
			t.Errorf("no flush: close wrote %d bytes, want none", written)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		judgeClean(t, img)
	}
}

// In sync mode every operation is on the device when it returns: a copy of the image taken
// while the volume is still open holds it, and fsck.fat finds nothing but the dirty bit.
func TestSyncModeDurable(t *testing.T) {
	for _, perSector := range []bool{false, true} {
		img := mkfsImage(t, "64M", "-F", "32")
		v, c := openCounting(t, img, Options{Sync: true, MirrorPerSector: perSector})
		if err := v.Mkdir("dir"); err != nil {
			t.Fatal(err)
		}
		f, err := v.Create("dir/file.bin")
		if err != nil {
			t.Fatal(err)
		}
		data := pattern(300_000, 5)
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if c.Stats().Flushes == 0 {
			t.Fatal("sync mode issued no device flush")
		}
		snapshot := t.TempDir() + "/copy.img"
		if out, err := exec.Command("cp", "--sparse=always", img, snapshot).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
		judgeClean(t, snapshot, fsck.Dirty)
		ro, err := OpenImage(snapshot, Options{ReadOnly: true, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(ro, "dir/file.bin")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("the copy holds %d bytes of dir/file.bin, not the %d written", len(got), len(data))
		}
		ro.Close()
		f.Close()
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func readAll(v *Volume, name string) ([]byte, error) {
	f, err := v.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Writes that cover only part of a 512-byte unit keep the bytes around them, both while they
// are cached and after they were written back.
func TestPartialUnitWrites(t *testing.T) {
	img := mkfsImage(t, "64M")
	v, _ := openCounting(t, img, Options{})
	f, err := v.Create("p.bin")
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(10000, 6)
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		got := make([]byte, len(want))
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: content differs", when)
		}
	}
	patch := func(off int, b []byte) {
		if _, err := f.WriteAt(b, int64(off)); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], b)
	}
	patch(100, []byte("cached"))
	check("while cached")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	patch(1023, []byte("across a unit boundary"))
	patch(9999, []byte("z"))
	check("after writeback, patched again")
	f.Close()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	v2, err := OpenImage(img, Options{ReadOnly: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	got, err := readAll(v2, "p.bin")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after reopen: err %v, equal %v", err, bytes.Equal(got, want))
	}
}

// DirtyBytes reports what is written but not written back, and falls to zero with Sync.
func TestDirtyBytes(t *testing.T) {
	img := mkfsImage(t, "64M")
	v, _ := openCounting(t, img, Options{})
	defer v.Close()
	f, err := v.Create("d.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(pattern(100_000, 7)); err != nil {
		t.Fatal(err)
	}
	if d := v.DirtyBytes(); d < 100_000 || d > 100_000+2*unitSize {
		t.Errorf("DirtyBytes after writing 100,000 bytes = %d", d)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	if d := v.DirtyBytes(); d != 0 {
		t.Errorf("DirtyBytes after Sync = %d", d)
	}
}
