package main

import (
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestSeedGoals runs the benchmarks at their small sizes and checks the goals that are counts,
// which do not depend on the machine: times are reported, never asserted.
func TestSeedGoals(t *testing.T) {
	testenv.RequireTool(t, "fsck.fat")
	if testing.Short() {
		t.Skip("benchmarks at small sizes take a while")
	}
	b := &bench{dir: t.TempDir(), quick: true}
	byName := map[string]workload{}
	for _, w := range workloads {
		byName[strings.Fields(w.name)[0]+" "+strings.Fields(w.name)[1]] = w
	}
	run := func(key string) []row {
		t.Helper()
		rows, err := byName[key].run(b)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return rows
	}

	// Seed 000: on large fallocates, batching cuts synchronous requests at least 20 times.
	rows := run("seed 000:")
	for i := 0; i+1 < len(rows); i += 2 {
		before, after := rows[i].stats, rows[i+1].stats
		if !strings.Contains(rows[i].variant, "16 MiB") {
			continue
		}
		if b, a := before.Writes+before.Flushes, after.Writes+after.Flushes; b < 20*a {
			t.Errorf("%s: %d synchronous requests against %d per sector, want 20x fewer", rows[i+1].variant, a, b)
		}
	}

	// Seed 003: the large copy goes out in requests of 4 MiB or more on average, and with the
	// waiting close-time flush nothing but metadata is left for unmount.
	rows = run("seed 003:")
	for _, r := range rows {
		if strings.Contains(r.variant, "1 x") && r.stats.AvgWriteSize() < 4<<20 {
			t.Errorf("%s: average write %.0f bytes, want at least 4 MiB", r.variant, r.stats.AvgWriteSize())
		}
		if strings.Contains(r.variant, "flush, wait") && r.unmount.BytesWritten > 64<<10 {
			t.Errorf("%s: %d bytes left for unmount, want only metadata", r.variant, r.unmount.BytesWritten)
		}
	}

	// Seed 004: no directory-entry write between open and close.
	rows = run("seed 004:")
	if n := rows[1].notes[0]; !strings.Contains(n, "close: 0 ") {
		t.Errorf("%s: %s", rows[1].variant, n)
	}
	if n := rows[0].notes[0]; strings.Contains(n, "close: 0 ") {
		t.Errorf("the stock variant wrote no entry either: the benchmark measures nothing: %s", n)
	}
}
