package volume

import (
	"strings"
	"testing"
)

// TestParseSnapshotID: the driver's own form round-trips; volume IDs and every form that could
// reach outside the snapshots directory are refused.
func TestParseSnapshotID(t *testing.T) {
	id := SnapshotID{Node: "worker-1", Name: "snapshot-5d1f.a_b"}
	got, err := ParseSnapshotID(id.String())
	if err != nil || got != id {
		t.Fatalf("ParseSnapshotID(%q) = %v, %v", id.String(), got, err)
	}
	for _, bad := range []string{
		"",
		"image:worker-1:vol",
		"usb:worker-1:vol",
		"snapshot:worker-1",
		"snapshot:worker-1:a:b",
		"snapshot:worker-1:..",
		"snapshot:worker-1:.hidden",
		"snapshot:worker-1:a/b",
		"snapshot:worker/1:a",
		"snapshot::a",
		"snapshot:worker-1:",
		"snapshot:worker-1:a\x00b",
		"snapshot:worker-1:" + strings.Repeat("a", MaxNameLength+1),
		strings.Repeat("s", MaxSnapshotIDLength+1),
		"fake-snapshot-id",
	} {
		if got, err := ParseSnapshotID(bad); err == nil {
			t.Errorf("ParseSnapshotID(%q) = %v, want an error", bad, got)
		}
	}
	if _, err := ParseID(id.String()); err == nil {
		t.Errorf("a snapshot ID parses as a volume ID")
	}
}
