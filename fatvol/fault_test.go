package fatvol_test

import (
	"bytes"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/internal/judge"
)

// A device that fails must not hang the engine, must not be written to again, and must leave what
// was made durable before it failed as it was. The engine stops taking writes at the first failed
// write or flush (as errors=remount-ro) and reports every device failure as EIO.

// hangLimit bounds every call that could block on a failed device; a call still running after it
// is a hang, not a slow machine: nothing here waits on anything but the engine's own locks.
const hangLimit = 20 * time.Second

// within runs fn and fails the test if it has not returned after hangLimit.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(hangLimit):
		t.Fatalf("%s: still blocked after %v", what, hangLimit)
	}
}

// vanishing is a device that can be pulled out: afterwards it answers as Linux answers for a
// removed disk whose capacity dropped to zero, writes with ENOSPC and reads with EOF, while its
// flush has nothing left to write and succeeds.
type vanishing struct {
	blockdev.Device
	mu   sync.Mutex
	gone bool
}

func (d *vanishing) pull() { d.mu.Lock(); d.gone = true; d.mu.Unlock() }

func (d *vanishing) isGone() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.gone }

func (d *vanishing) ReadAt(p []byte, off int64) (int, error) {
	if d.isGone() {
		return 0, io.EOF
	}
	return d.Device.ReadAt(p, off)
}

func (d *vanishing) WriteAt(p []byte, off int64) (int, error) {
	if d.isGone() {
		return 0, &os.PathError{Op: "write", Path: "/dev/sdz", Err: syscall.ENOSPC}
	}
	return d.Device.WriteAt(p, off)
}

func (d *vanishing) WritevAt(bufs [][]byte, off int64) (int, error) {
	if d.isGone() {
		return 0, &os.PathError{Op: "write", Path: "/dev/sdz", Err: syscall.ENOSPC}
	}
	return d.Device.WritevAt(bufs, off)
}

// failingDevice is an image under a Faulty wrapper (to fail it) under a Counting one (to see
// whether the engine still writes).
type failingDevice struct {
	img      string
	counting *blockdev.Counting
	faulty   *blockdev.Faulty
	vanish   *vanishing
}

func openFailing(t *testing.T, img string) (*fatvol.Volume, *failingDevice) {
	t.Helper()
	dev, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	fd := &failingDevice{img: img, vanish: &vanishing{Device: dev}}
	fd.faulty = blockdev.NewFaulty(fd.vanish)
	fd.counting = blockdev.NewCounting(fd.faulty)
	v, err := fatvol.Open(fd.counting, fatvol.Options{Logger: quietLogger})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v, fd
}

// TestDeviceFailure fails the device in the ways a disk fails (a write error, a power cut that
// drops everything after some writes, a failing flush, a pulled stick) while a file has dirty
// data, and checks what applications see and what is left on the image.
func TestDeviceFailure(t *testing.T) {
	cases := []struct {
		name string
		fail func(*failingDevice)
	}{
		{"write error", func(d *failingDevice) { d.faulty.FailWritesAfter(0) }},
		{"stop after a write", func(d *failingDevice) { d.faulty.StopAfterWrites(1) }},
		{"flush error", func(d *failingDevice) { d.faulty.FailFlush(true) }},
		{"pulled stick", func(d *failingDevice) { d.vanish.pull() }},
	}
	for _, spec := range []volumeSpec{fat12, fat32} {
		for _, c := range cases {
			t.Run(spec.name+"/"+c.name, func(t *testing.T) {
				img := makeImage(t, spec)
				v, dev := openFailing(t, img)
				kept := bytes.Repeat([]byte("kept "), 3000)
				writeVolumeFile(t, v, "KEPT.TXT", kept)
				if err := v.Sync(); err != nil {
					t.Fatal(err)
				}
				f, err := v.Create("LOST.TXT")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.Write(bytes.Repeat([]byte("lost "), 3000)); err != nil {
					t.Fatal(err)
				}
				c.fail(dev)
				within(t, "fsync on the failed device", func() {
					wantErrno(t, "fsync on the failed device", f.Sync(), syscall.EIO)
				})
				wantErrno(t, "Err", &os.PathError{Op: "err", Path: img, Err: v.Err()}, syscall.EIO)

				// The device works again, but the volume does not write to it: what is on it
				// stays as the failure left it.
				dev.faulty.Disarm()
				before := dev.counting.Stats().Writes
				within(t, "writes after the failure", func() {
					_, err := f.Write([]byte("more"))
					wantErrno(t, "write to an open file", err, syscall.EIO)
					_, err = v.Create("NEW.TXT")
					wantErrno(t, "create", err, syscall.EIO)
					wantErrno(t, "mkdir", v.Mkdir("DIR"), syscall.EIO)
					wantErrno(t, "remove", v.Remove("KEPT.TXT"), syscall.EIO)
					wantErrno(t, "sync", f.Sync(), syscall.EIO)
				})
				if !dev.vanish.isGone() {
					if got := readVolumeFile(t, v, "KEPT.TXT"); !bytes.Equal(got, kept) {
						t.Errorf("KEPT.TXT read after the failure: %s", describeDiff(kept, got))
					}
				}
				within(t, "close", func() {
					f.Close()
					wantErrno(t, "close volume", &os.PathError{Op: "close", Path: img, Err: v.Close()}, syscall.EIO)
				})
				if after := dev.counting.Stats().Writes; after != before {
					t.Errorf("%d write requests reached the device after it failed", after-before)
				}

				// What was synced before the failure is intact, and nothing else is wrong but the
				// dirty bit, which stays set (the volume could not be closed cleanly), and lost
				// clusters where the failure came between a chain and its entry, as a power cut
				// there leaves them (docs/engine.md, write order).
				if err := judge.Check(img, fsck.Dirty, fsck.LostClusters); err != nil {
					t.Error(err)
				}
				v2 := openVolume(t, img)
				if got := readVolumeFile(t, v2, "KEPT.TXT"); !bytes.Equal(got, kept) {
					t.Errorf("KEPT.TXT after reopening: %s", describeDiff(kept, got))
				}
				closeVolume(t, v2)
			})
		}
	}
}

// TestDeviceFailureInBackground lets the background writer meet the failure, with no
// application call waiting on it: the next write learns of it.
func TestDeviceFailureInBackground(t *testing.T) {
	img := makeImage(t, fat12)
	dev, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	faulty := blockdev.NewFaulty(dev)
	v, err := fatvol.Open(faulty, fatvol.Options{Logger: quietLogger, DirtyExpire: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Create("A.TXT")
	if err != nil {
		t.Fatal(err)
	}
	faulty.FailWritesAfter(0)
	if _, err := f.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(hangLimit)
	for v.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the background writer did not meet the failure within %v", hangLimit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	dropped := faulty.Dropped()
	_, err = f.Write([]byte("more"))
	wantErrno(t, "write after the background writer failed", err, syscall.EIO)
	// Give the background writer its chances to retry: it must not.
	time.Sleep(100 * time.Millisecond)
	if got := faulty.Dropped(); got != dropped {
		t.Errorf("the engine tried %d more writes on the failed device", got-dropped)
	}
}

// TestDeviceFailureContinue: under ContinueAfterDeviceError (errors=continue) a failed write is
// still EIO, but once the device works again so does the volume.
func TestDeviceFailureContinue(t *testing.T) {
	img := makeImage(t, fat12)
	dev, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	faulty := blockdev.NewFaulty(dev)
	v, err := fatvol.Open(faulty, fatvol.Options{Logger: quietLogger, ContinueAfterDeviceError: true})
	if err != nil {
		t.Fatal(err)
	}
	writeVolumeFile(t, v, "A.TXT", []byte("a"))
	faulty.FailWritesAfter(0)
	wantErrno(t, "sync on a failing device", pathError(v.Sync()), syscall.EIO)
	if v.Err() != nil {
		t.Errorf("Err() = %v under ContinueAfterDeviceError", v.Err())
	}
	faulty.Disarm()
	writeVolumeFile(t, v, "B.TXT", []byte("b"))
	closeVolume(t, v)
	checkClean(t, img)
	v2 := openVolume(t, img)
	for name, want := range map[string]string{"A.TXT": "a", "B.TXT": "b"} {
		if got := readVolumeFile(t, v2, name); string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func pathError(err error) error {
	if err == nil {
		return nil
	}
	return &os.PathError{Op: "op", Path: "volume", Err: err}
}

// TestDeviceFailureSyncMode: in sync mode nothing waits in memory, so the write itself meets the
// failure and returns EIO.
func TestDeviceFailureSyncMode(t *testing.T) {
	img := makeImage(t, fat12)
	dev, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	vanish := &vanishing{Device: dev}
	v, err := fatvol.Open(vanish, fatvol.Options{Logger: quietLogger, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	writeVolumeFile(t, v, "KEPT.TXT", []byte("kept"))
	f, err := v.Create("A.TXT")
	if err != nil {
		t.Fatal(err)
	}
	vanish.pull()
	within(t, "a sync-mode write on a pulled stick", func() {
		_, err := f.Write([]byte("data"))
		wantErrno(t, "a sync-mode write on a pulled stick", err, syscall.EIO)
	})
	if v.Err() == nil {
		t.Error("Err() is nil after a failed sync-mode write")
	}
}
