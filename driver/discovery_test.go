package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"

	"github.com/csi-fat/csi-fat/internal/testenv"
	"github.com/csi-fat/csi-fat/node/discovery"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"
)

// mediumOf finds a stick in the pool's status by its serial.
func mediumOf(t *testing.T, td *testDriver, serial string) media.Status {
	t.Helper()
	seen, err := td.Manager().MediaStatus()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range seen {
		if m.Serial == serial {
			return m
		}
	}
	t.Fatalf("no medium with serial %s in %+v", serial, seen)
	return media.Status{}
}

// TestDiscoveredVolumes: the volume discovery mode makes for a medium (what its loop publishes as
// a PV) adopts a FAT stick with its files, checked in the mounter, and answers its label; it
// stages by its ID alone, as the kubelet stages a PV; asked again it is the same volume; a blank stick is formatted with the parameters only when blank media are asked for,
// and a stick that holds another file system is never touched; released (DeleteVolume, reclaim
// keep) the stick keeps its files and is adoptable again.
func TestDiscoveredVolumes(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	cam := fake.Add(t, 48<<20, "Fake", "Camera Card", "DISC0001")
	blank := fake.Add(t, 40<<20, "Fake", "Blank", "DISC0002")
	ext := fake.Add(t, 40<<20, "Fake", "Ext", "DISC0003")
	run(t, "mkfs.fat", "-n", "CAM01", cam.Loop)
	photo := filepath.Join(t.TempDir(), "photo.jpg")
	if err := os.WriteFile(photo, []byte("a photo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "mcopy", "-i", cam.Loop, photo, "::/PHOTO.JPG")
	testenv.RequireTool(t, "mkfs.ext4", "sfdisk")
	run(t, "mkfs.ext4", "-q", ext.Loop)
	extBefore := run(t, "sha256sum", ext.Loop)[:64]

	td := startDriver(t, "", withUSB(fake))
	ctx := context.Background()
	cfg := &discovery.Config{DriverName: DefaultDriverName, ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, Interval: time.Second,
		Parameters: map[string]string{volume.ParamMode: volume.ModeFlush, volume.ParamLabel: "fresh", volume.ParamLayout: "mbr"}}
	if err := cfg.Prepare(); err != nil {
		t.Fatal(err)
	}

	m := mediumOf(t, td, "DISC0001")
	rec, label, err := td.Manager().CreateDiscoveredVolume(cfg, m, "")
	if err != nil {
		t.Fatal(err)
	}
	if label != "CAM01" || rec.Device != m.ID || rec.Size != cam.Size || !rec.Params.Adopt || rec.Params.Reclaim != volume.ReclaimKeep || rec.Params.Mode != volume.ModeFlush {
		t.Fatalf("discovered volume %+v, label %q; want the camera stick adopted, kept on release, mode flush, label CAM01", rec, label)
	}
	if !strings.HasPrefix(rec.Name, "fat-"+testNode+"-") {
		t.Errorf("volume name %q does not show its node", rec.Name)
	}
	if same, _, err := td.Manager().CreateDiscoveredVolume(cfg, mediumOf(t, td, "DISC0001"), ""); err != nil || same.ID != rec.ID {
		t.Fatalf("discovering a claimed stick again: %+v, %v; want its volume %s, once", same, err, rec.ID)
	}
	if st := mediumOf(t, td, "DISC0001"); st.State != "claimed" || st.Volume != rec.ID {
		t.Errorf("camera stick %+v, want claimed by %s", st, rec.ID)
	}

	dir := t.TempDir()
	target := stageAndPublish(t, td, rec.ID, dir)
	if got, err := os.ReadFile(filepath.Join(target, "PHOTO.JPG")); err != nil || string(got) != "a photo\n" {
		t.Fatalf("the camera's file reads %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(target, "from-pod.txt"), []byte("written by a pod\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unpublishAndUnstage(t, td, rec.ID, dir)
	if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: rec.ID}); err != nil {
		t.Fatal(err)
	}
	run(t, "fsck.fat", "-n", cam.Loop)
	if out := run(t, "mtype", "-i", cam.Loop, "::/from-pod.txt"); out != "written by a pod\n" {
		t.Fatalf("after release, from-pod.txt = %q", out)
	}
	// Released, the stick is free FAT again: discovery makes its volume again, same name.
	again, _, err := td.Manager().CreateDiscoveredVolume(cfg, mediumOf(t, td, "DISC0001"), "")
	if err != nil || again.Name != rec.Name {
		t.Fatalf("discovered again: %+v, %v; want volume %s", again, err, rec.Name)
	}

	// A blank stick only when asked.
	if _, _, err := td.Manager().CreateDiscoveredVolume(cfg, mediumOf(t, td, "DISC0002"), ""); code(err) != codes.FailedPrecondition {
		t.Fatalf("blank stick without Blank: %v, want FailedPrecondition", err)
	}
	cfg.Blank = true
	brec, blabel, err := td.Manager().CreateDiscoveredVolume(cfg, mediumOf(t, td, "DISC0002"), "")
	if err != nil || blabel != "FRESH" || brec.Params.Adopt || brec.Params.Layout != "mbr" {
		t.Fatalf("blank stick: %+v, %q, %v; want formatted with layout mbr and label FRESH", brec, blabel, err)
	}
	if out := run(t, "sfdisk", "--dump", blank.Loop); !strings.Contains(out, "label: dos") || strings.Count(out, "type=") != 1 {
		t.Errorf("blank stick after discovery: sfdisk --dump\n%s\nwant an MBR with one partition", out)
	}
	// Another file system: never published, nothing written.
	if _, _, err := td.Manager().CreateDiscoveredVolume(cfg, mediumOf(t, td, "DISC0003"), ""); err == nil {
		t.Fatal("a stick with ext4 made a discovered volume")
	}
	if after := run(t, "sha256sum", ext.Loop)[:64]; after != extBefore {
		t.Error("the ext4 stick changed")
	}
}

// TestDiscoveredPartitions: each FAT partition of a partitioned stick is a discovered volume of
// its own, with its partition's size and file system label, and serves its own files.
func TestDiscoveredPartitions(t *testing.T) {
	requireLoop(t)
	testenv.RequireTool(t, "sfdisk")
	fake := usbtest.New(t)
	stick := fake.Add(t, 64<<20, "Fake", "Twin", "DISCTWIN")
	one, other, two := mbrParts[0], mbrParts[1], mbrParts[2]
	sfdiskWrite(t, stick.Loop, fmt.Sprintf("label: dos\nstart=%d, size=%d, type=c\nstart=%d, size=%d, type=83\nstart=%d, type=c\n",
		one.start/512, one.size/512, other.start/512, other.size/512, two.start/512))
	makeFATAt(t, stick.Loop, one, "ONE", "first\n")
	makeFATAt(t, stick.Loop, two, "TWO", "second\n")
	td := startDriver(t, "", withUSB(fake))
	cfg := &discovery.Config{DriverName: DefaultDriverName, ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, Interval: time.Second}
	if err := cfg.Prepare(); err != nil {
		t.Fatal(err)
	}
	m := mediumOf(t, td, "DISCTWIN")
	if len(m.Partitions) != 2 {
		t.Fatalf("medium %+v: want its two FAT partitions listed", m)
	}
	want := map[string]struct {
		label, note string
		size        int64
	}{"1": {"ONE", "first\n", one.size}, "3": {"TWO", "second\n", two.size}}
	names := map[string]bool{}
	for _, p := range m.Partitions {
		w, ok := want[p.ID()]
		if !ok {
			t.Fatalf("partition %s listed", p.ID())
		}
		rec, label, err := td.Manager().CreateDiscoveredVolume(cfg, mediumOf(t, td, "DISCTWIN"), p.ID())
		if err != nil {
			t.Fatalf("partition %s: %v", p.ID(), err)
		}
		if rec.Partition != p.ID() || rec.Size != w.size || label != w.label || rec.Device != m.ID {
			t.Errorf("partition %s: volume %+v, label %q; want size %d, label %s", p.ID(), rec, label, w.size, w.label)
		}
		names[rec.Name] = true
		dir := t.TempDir()
		target := stageAndPublish(t, td, rec.ID, dir)
		if got, err := os.ReadFile(filepath.Join(target, "NOTE.TXT")); err != nil || string(got) != w.note {
			t.Errorf("partition %s: NOTE.TXT reads %q, %v", p.ID(), got, err)
		}
		unpublishAndUnstage(t, td, rec.ID, dir)
	}
	if len(names) != 2 {
		t.Errorf("volume names %v: want one per partition", names)
	}
	if st := mediumOf(t, td, "DISCTWIN"); st.State != "claimed" || len(st.Partitions) != 2 || st.Partitions[0].State != "claimed" || st.Partitions[1].State != "claimed" {
		t.Errorf("the stick after both were discovered: %+v", st)
	}
}
