package layout

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// losetupPartitions attaches img with partition scanning (losetup -P) and returns the loop
// device; it is detached at cleanup.
func losetupPartitions(tb testing.TB, img string) string {
	tb.Helper()
	testenv.RequireLoop(tb)
	out, err := exec.Command("losetup", "--find", "--show", "--partscan", img).CombinedOutput()
	if err != nil {
		tb.Fatalf("losetup -P %s: %v: %s", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	tb.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			tb.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// partitionNode returns the kernel's node of partition n of a loop device attached with -P.
// A kernel built without the MBR and GPT parsers (CONFIG_MSDOS_PARTITION, CONFIG_EFI_PARTITION)
// makes none: then partx -a reads the table with libblkid and adds the partitions (BLKPG), so the
// kernel's partition device still bounds what is read through it.
func partitionNode(tb testing.TB, loop string, n int) string {
	tb.Helper()
	p := fmt.Sprintf("%sp%d", loop, n)
	for i := 0; i < 2; i++ {
		for j := 0; j < 50; j++ {
			if _, err := os.Stat(p); err == nil {
				return p
			}
			time.Sleep(20 * time.Millisecond)
		}
		if i == 0 {
			testenv.RequireTool(tb, "partx")
			tb.Logf("%s: the kernel made no partition devices; adding them with partx -a", loop)
			if out, err := exec.Command("partx", "-a", loop).CombinedOutput(); err != nil {
				tb.Fatalf("partx -a %s: %v: %s", loop, err, out)
			}
		}
	}
	tb.Fatalf("%s did not appear after losetup -P and partx -a", p)
	return ""
}

// hashOutside hashes every byte of the device outside [start, end).
func hashOutside(tb testing.TB, dev blockdev.Device, start, end int64) [32]byte {
	tb.Helper()
	h := sha256.New()
	for _, r := range [][2]int64{{0, start}, {end, dev.Size()}} {
		if _, err := io.Copy(h, io.NewSectionReader(dev, r[0], r[1]-r[0])); err != nil {
			tb.Fatal(err)
		}
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// TestWindowOnPartitionedLoop formats and fills the FAT partition of a loop device through a
// Window of the whole device and requires: every byte outside the partition unchanged (random
// bytes there, hashed before and after), the partition's bytes equal to what the kernel's
// partition device (losetup -P) reads, and fsck.fat finding the volume clean there.
func TestWindowOnPartitionedLoop(t *testing.T) {
	testenv.RequireTool(t, "fsck.fat")
	const size = 48 << 20
	img := sfdiskImage(t, size, "label: dos\nstart=2048, size=32768, type=c\nstart=34816, type=83\n")
	// Random bytes everywhere but the table, so a stray write anywhere shows.
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, size-512)
	rand.Read(noise)
	if _, err := f.WriteAt(noise, 512); err != nil {
		t.Fatal(err)
	}
	f.Close()
	loop := losetupPartitions(t, img)
	part := partitionNode(t, loop, 1)

	dev, err := blockdev.Open(loop, false)
	if err != nil {
		t.Fatal(err)
	}
	const start, end = 2048 * 512, (2048 + 32768) * 512
	before := hashOutside(t, dev, start, end)
	_, _, err = Open(dev, "")
	if !errors.Is(err, ErrNoFAT) {
		t.Fatalf("before mkfs: %v, want ErrNoFAT (the partition holds random bytes)", err)
	}
	if _, _, err = Open(dev, "1"); err == nil {
		t.Fatal("partition 1 of random bytes opened as FAT")
	}
	w, err := blockdev.NewWindow(dev, start, end-start)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mkfs.Format(w, mkfs.Options{HiddenSectors: 2048}); err != nil {
		t.Fatal(err)
	}
	vdev, p, err := Open(dev, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Number != 1 || p.Start != start || vdev.Size() != end-start {
		t.Fatalf("found %v (device of %d bytes), want partition 1 at %d", p, vdev.Size(), start)
	}
	vol, err := fatvol.Open(vdev, fatvol.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Fill the volume to the last cluster: files of 1 MiB, the last one written a cluster at a
	// time until the volume is full.
	chunk := bytes.Repeat([]byte("window"), 1<<18)
	step := 256 << 10
	for i := 0; step > 0; i++ {
		fh, err := vol.Create(fmt.Sprintf("FILE%03d.BIN", i))
		if err != nil {
			t.Fatal(err)
		}
		for written := 0; written < 1<<20 && step > 0; {
			_, err := fh.Write(chunk[:step])
			switch {
			case err == nil:
				written += step
			case errors.Is(err, syscall.ENOSPC) && step > 2048:
				step = 2048
			case errors.Is(err, syscall.ENOSPC):
				step = 0
			case err != nil:
				t.Fatal(err)
			}
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := vol.StatFS()
	if err != nil {
		t.Fatal(err)
	}
	if st.FreeClusters != 0 {
		t.Fatalf("%d clusters left free after the fill", st.FreeClusters)
	}
	if err := vol.Close(); err != nil {
		t.Fatal(err)
	}
	dev, err = blockdev.Open(loop, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if after := hashOutside(t, dev, start, end); after != before {
		t.Fatal("bytes outside the partition changed")
	}
	// The kernel's partition device has a page cache of its own: drop it before reading.
	pf, err := os.Open(part)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	if err := unix.IoctlSetInt(int(pf.Fd()), unix.BLKFLSBUF, 0); err != nil {
		t.Fatal(err)
	}
	viaKernel, err := io.ReadAll(pf)
	if err != nil {
		t.Fatal(err)
	}
	viaWindow := make([]byte, end-start)
	if _, err := dev.ReadAt(viaWindow, start); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(viaKernel, viaWindow) {
		t.Fatalf("%s (%d bytes) differs from the window's bytes", part, len(viaKernel))
	}
	if out, err := exec.Command("fsck.fat", "-n", part).CombinedOutput(); err != nil {
		t.Fatalf("fsck.fat -n %s: %v\n%s", part, err, out)
	}
}
