package driver

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csi-fat/csi-fat/internal/judge"
	"github.com/csi-fat/csi-fat/node/usbtest"
)

// hangLimit bounds every call that could block on a vanished device. Nothing in these tests
// waits on anything slower than a FUSE round trip, so a call still running after it hangs.
const hangLimit = 30 * time.Second

// within runs fn and fails the test at once if it has not returned after hangLimit.
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

func errnoIs(err error, want syscall.Errno) bool { return errors.Is(err, want) }

func volumeCondition(t *testing.T, td *testDriver, id, path string) *csi.VolumeCondition {
	t.Helper()
	var resp *csi.NodeGetVolumeStatsResponse
	var err error
	within(t, "NodeGetVolumeStats", func() {
		resp, err = td.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
	})
	if err != nil {
		t.Fatalf("NodeGetVolumeStats %s at %s: %v", id, path, err)
	}
	return resp.GetVolumeCondition()
}

// TestUSBPulledWhileWriting pulls a stick out (its loop device loses its capacity, as a removed
// disk does) while an application writes to its volume through the real mount, beside a second
// volume on the same driver. The application gets EIO at fsync and EROFS for later changes,
// nothing blocks, the condition turns abnormal and stays so after the stick is back, the other
// volume keeps working, unpublish and unstage succeed with the stick gone, and once it is back the
// volume stages again with what was fsync'ed before the pull, on a file system fsck.fat finds
// clean.
func TestUSBPulledWhileWriting(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	stick := fake.Add(t, 32<<20, "Fake", "Pulled", "PULL0001")
	td := startDriver(t, "", withUSB(fake))
	ctx := context.Background()
	usb, err := usbVolume(t, td, "pulled", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "beside", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	usbDir, otherDir := t.TempDir(), t.TempDir()
	usbTarget := stageAndPublish(t, td, usb.GetVolumeId(), usbDir)
	otherTarget := stageAndPublish(t, td, other.GetVolume().GetVolumeId(), otherDir)

	synced := bytes.Repeat([]byte("synced before the pull\n"), 20000)
	if err := writeFsynced(filepath.Join(usbTarget, "SYNCED.TXT"), synced); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(usbTarget, "LOST.BIN"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0xA5}, 256<<10)
	if _, err := f.Write(chunk); err != nil {
		t.Fatal(err)
	}

	fake.Pull(t, stick)

	// Writes land in the engine's cache, as in the page cache: the failure shows at fsync.
	within(t, "write and fsync on the pulled stick", func() {
		if _, err := f.Write(chunk); err != nil && !errnoIs(err, syscall.EIO) {
			t.Errorf("write after the pull: %v, want success (cached) or EIO", err)
		}
		if err := f.Sync(); !errnoIs(err, syscall.EIO) {
			t.Errorf("fsync after the pull: %v, want EIO", err)
		}
		// The mount went read-only (errors=remount-ro): later changes are refused at once.
		if _, err := f.Write(chunk); !errnoIs(err, syscall.EROFS) {
			t.Errorf("write after the failed fsync: %v, want EROFS", err)
		}
		if err := os.WriteFile(filepath.Join(usbTarget, "NEW.TXT"), []byte("x"), 0o644); !errnoIs(err, syscall.EROFS) {
			t.Errorf("create after the failed fsync: %v, want EROFS", err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("close after the failure: %v, want success (as vfat: errors show at fsync)", err)
		}
	})
	cond := volumeCondition(t, td, usb.GetVolumeId(), usbTarget)
	if !cond.GetAbnormal() || !strings.Contains(cond.GetMessage(), stick.ByID) {
		t.Errorf("condition with the stick pulled: %v; want abnormal, naming %s", cond, stick.ByID)
	}

	// The other volume does not notice.
	beside := bytes.Repeat([]byte("beside\n"), 10000)
	within(t, "the other volume", func() {
		if err := writeFsynced(filepath.Join(otherTarget, "BESIDE.TXT"), beside); err != nil {
			t.Errorf("writing the other volume: %v", err)
		}
		if got, err := os.ReadFile(filepath.Join(otherTarget, "BESIDE.TXT")); err != nil || !bytes.Equal(got, beside) {
			t.Errorf("reading the other volume: %d bytes, %v", len(got), err)
		}
	})
	if cond := volumeCondition(t, td, other.GetVolume().GetVolumeId(), otherTarget); cond.GetAbnormal() {
		t.Errorf("condition of the other volume: %v", cond)
	}

	// Back in the slot, the device answers, but the volume served since before the pull must
	// not write to it and says so.
	fake.Replug(t, stick)
	cond = volumeCondition(t, td, usb.GetVolumeId(), usbTarget)
	if !cond.GetAbnormal() || !strings.Contains(cond.GetMessage(), "no more writes") {
		t.Errorf("condition with the stick back, before staging again: %v; want abnormal: the volume takes no more writes", cond)
	}
	within(t, "unpublish and unstage the failed volume", func() {
		unpublishAndUnstage(t, td, usb.GetVolumeId(), usbDir)
	})
	// Staged again, it serves what was fsync'ed before the pull, and takes writes.
	usbTarget = stageAndPublish(t, td, usb.GetVolumeId(), usbDir)
	if got, err := os.ReadFile(filepath.Join(usbTarget, "SYNCED.TXT")); err != nil || !bytes.Equal(got, synced) {
		t.Errorf("SYNCED.TXT after re-plugging: %d bytes, %v; want the %d bytes fsync'ed before the pull", len(got), err, len(synced))
	}
	if err := writeFsynced(filepath.Join(usbTarget, "AFTER.TXT"), []byte("after")); err != nil {
		t.Errorf("writing after staging again: %v", err)
	}
	if cond := volumeCondition(t, td, usb.GetVolumeId(), usbTarget); cond.GetAbnormal() {
		t.Errorf("condition after staging again: %v", cond)
	}
	unpublishAndUnstage(t, td, usb.GetVolumeId(), usbDir)
	if err := judge.Check(stick.Loop); err != nil {
		t.Error(err)
	}
	unpublishAndUnstage(t, td, other.GetVolume().GetVolumeId(), otherDir)
}

// TestUSBUnstageWhilePulled: a volume whose stick is gone unpublishes and unstages without
// blocking, and kubelet's retries of both succeed; staging it again waits for the stick.
func TestUSBUnstageWhilePulled(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	stick := fake.Add(t, 32<<20, "Fake", "Gone", "GONE0002")
	td := startDriver(t, "", withUSB(fake))
	vol, err := usbVolume(t, td, "gone", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	target := stageAndPublish(t, td, vol.GetVolumeId(), dir)
	// Dirty data the driver will try to write back at unpublish and unstage.
	if err := os.WriteFile(filepath.Join(target, "DIRTY.TXT"), []byte("never written"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake.Pull(t, stick)
	within(t, "unpublish and unstage with the stick pulled", func() {
		unpublishAndUnstage(t, td, vol.GetVolumeId(), dir)
		unpublishAndUnstage(t, td, vol.GetVolumeId(), dir)
	})
	if m := mountsUnder(t, dir); len(m) != 0 {
		t.Errorf("mounts left after unstaging: %v", m)
	}
	fake.Replug(t, stick)
	stageAndPublish(t, td, vol.GetVolumeId(), dir)
	unpublishAndUnstage(t, td, vol.GetVolumeId(), dir)
	if err := judge.Check(stick.Loop); err != nil {
		t.Error(err)
	}
}

// writeFsynced writes a file and fsyncs it.
func writeFsynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
