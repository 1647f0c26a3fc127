package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStateRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	s := newState()
	s.Volumes["v"] = &VolumeRecord{ID: "usb:n:v", Name: "v", Size: 1 << 20, Params: Params{Pool: PoolUSB, Mode: ModeSync, Reclaim: ReclaimWipe}, Device: "usb-A_B_C-0:0"}
	s.Staged["v"] = &StageRecord{Path: "/staging", MountFlags: []string{"noatime"}, MountGroup: "2000", AccessMode: 7}
	s.Published["/target"] = &PublishRecord{Name: "v", ReadOnly: true}
	if err := s.save(path); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if *got.Volumes["v"] != *s.Volumes["v"] || got.Staged["v"].MountGroup != "2000" || !got.Published["/target"].ReadOnly {
		t.Fatalf("state read back as %+v", got)
	}
	// Only the state file is left: the temporary file was renamed over it.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("state directory holds %d files, want 1", len(entries))
	}
	if err := os.WriteFile(path, []byte(`{"version": 99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadState(path); err == nil {
		t.Fatalf("a state file of another version was read")
	}
	if s, err := loadState(filepath.Join(t.TempDir(), "missing.json")); err != nil || len(s.Volumes) != 0 {
		t.Fatalf("a missing state file: %v, %v", s, err)
	}
}

// TestInFlightAborted: a second operation on a volume while one runs is Aborted.
func TestInFlightAborted(t *testing.T) {
	dir := t.TempDir()
	m, err := NewManager(Config{NodeID: "n", TopologyKey: "k/node", StateDir: filepath.Join(dir, "state"), PoolDir: filepath.Join(dir, "pool")})
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := m.lock("busy", "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateVolume(context.Background(), "busy", 1<<20, 0, Params{Pool: PoolImage, Mode: ModeDefault}); status.Code(err) != codes.Aborted {
		t.Fatalf("CreateVolume while another operation holds the volume: %v, want Aborted", err)
	}
	if err := m.DeleteVolume(context.Background(), "image:n:busy"); status.Code(err) != codes.Aborted {
		t.Fatalf("DeleteVolume while another operation holds the volume: %v, want Aborted", err)
	}
	unlock()
	if _, err := m.CreateVolume(context.Background(), "busy", 1<<20, 0, Params{Pool: PoolImage, Mode: ModeDefault}); err != nil {
		t.Fatalf("CreateVolume after the lock is released: %v", err)
	}
	// A new manager on the same directories knows the volume.
	m2, err := NewManager(Config{NodeID: "n", TopologyKey: "k/node", StateDir: filepath.Join(dir, "state"), PoolDir: filepath.Join(dir, "pool")})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := m2.Volume("image:n:busy"); err != nil || rec.Size != 1<<20 {
		t.Fatalf("after a restart the volume reads %+v, %v", rec, err)
	}
}
