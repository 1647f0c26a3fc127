package volume

import (
	"fmt"
	"strings"
)

// SnapshotPool is the first part of every snapshot ID: snapshots live in the image pool's
// snapshots directory, whatever pool their volume lives in.
const SnapshotPool = "snapshot"

// MaxSnapshotIDLength bounds a whole snapshot ID.
const MaxSnapshotIDLength = len(SnapshotPool) + 1 + MaxNodeIDLength + 1 + MaxNameLength

// SnapshotID is what a snapshot ID carries: the node the snapshot lives on and its name, which
// is also its file name. Its string form is "snapshot:<node>:<name>", e.g.
// "snapshot:worker-1:snapshot-5d1f...", so that a volume ID is never taken for a snapshot's and
// another node's snapshot is recognised as such.
type SnapshotID struct {
	Node string
	Name string
}

func (id SnapshotID) String() string { return SnapshotPool + ":" + id.Node + ":" + id.Name }

// ParseSnapshotID reads and validates a snapshot ID with the rules of ParseID.
func ParseSnapshotID(s string) (SnapshotID, error) {
	if s == "" {
		return SnapshotID{}, fmt.Errorf("snapshot ID is empty")
	}
	if len(s) > MaxSnapshotIDLength {
		return SnapshotID{}, fmt.Errorf("snapshot ID is %d bytes, more than %d", len(s), MaxSnapshotIDLength)
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 || parts[0] != SnapshotPool {
		return SnapshotID{}, fmt.Errorf("snapshot ID %q: want %s:<node>:<name>", s, SnapshotPool)
	}
	id := SnapshotID{Node: parts[1], Name: parts[2]}
	if err := ValidateNodeID(id.Node); err != nil {
		return SnapshotID{}, fmt.Errorf("snapshot ID %q: %w", s, err)
	}
	if err := ValidateToken("snapshot name", id.Name, MaxNameLength); err != nil {
		return SnapshotID{}, fmt.Errorf("snapshot ID %q: %w", s, err)
	}
	return id, nil
}
