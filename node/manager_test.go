package node

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/csi-fat/csi-fat/node/inprocess"
	"github.com/csi-fat/csi-fat/node/volume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestInFlightAborted: a second operation on a volume while one runs is Aborted.
func TestInFlightAborted(t *testing.T) {
	dir := t.TempDir()
	m, err := NewManager(Config{NodeID: "n", TopologyKey: "k/node", StateDir: filepath.Join(dir, "state"), PoolDir: filepath.Join(dir, "pool"), InProcess: inprocess.Engine{}})
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := m.locks.Take("busy", "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateVolume(context.Background(), "busy", 1<<20, 0, volume.Params{Pool: volume.PoolImage, Mode: volume.ModeDefault}); status.Code(err) != codes.Aborted {
		t.Fatalf("CreateVolume while another operation holds the volume: %v, want Aborted", err)
	}
	if err := m.DeleteVolume(context.Background(), "image:n:busy"); status.Code(err) != codes.Aborted {
		t.Fatalf("DeleteVolume while another operation holds the volume: %v, want Aborted", err)
	}
	unlock()
	if _, err := m.CreateVolume(context.Background(), "busy", 1<<20, 0, volume.Params{Pool: volume.PoolImage, Mode: volume.ModeDefault}); err != nil {
		t.Fatalf("CreateVolume after the lock is released: %v", err)
	}
	// A new manager on the same directories knows the volume.
	m2, err := NewManager(Config{NodeID: "n", TopologyKey: "k/node", StateDir: filepath.Join(dir, "state"), PoolDir: filepath.Join(dir, "pool"), InProcess: inprocess.Engine{}})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := m2.Volume("image:n:busy"); err != nil || rec.Size != 1<<20 {
		t.Fatalf("after a restart the volume reads %+v, %v", rec, err)
	}
}
