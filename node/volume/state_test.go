package volume

import (
	"os"
	"path/filepath"
	"testing"
)

func TestStateRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	s := NewState()
	s.Volumes["v"] = &Record{ID: "usb:n:v", Name: "v", Size: 1 << 20, Params: Params{Pool: PoolUSB, Mode: ModeSync, Reclaim: ReclaimWipe}, Device: "usb-A_B_C-0:0"}
	s.Staged["v"] = &StageRecord{Path: "/staging", MountFlags: []string{"noatime"}, MountGroup: "2000", AccessMode: 7}
	s.Published["/target"] = &PublishRecord{Name: "v", ReadOnly: true}
	if err := s.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(path)
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
	if _, err := LoadState(path); err == nil {
		t.Fatalf("a state file of another version was read")
	}
	if s, err := LoadState(filepath.Join(t.TempDir(), "missing.json")); err != nil || len(s.Volumes) != 0 {
		t.Fatalf("a missing state file: %v, %v", s, err)
	}
}
