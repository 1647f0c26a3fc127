package mounter

import (
	"math"
	"runtime/debug"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// TestMemoryBound: a mounter held to a bound sets the Go runtime's limit to what the engine's
// page buffers and the binary leave of it, and OpMemory reports the bound, the runtime's limit
// and its resident memory; unbounded, it sets none. Its check is bounded by what the limit
// leaves (fsck.Options.MaxMemory, tested in fatvol/fsck).
func TestMemoryBound(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for _, c := range []struct{ bound, cache, want int64 }{
		{224 << 20, 64 << 20, 136 << 20},
		{416 << 20, 256 << 20, 136 << 20},
		{100 << 20, 90 << 20, 25 << 20}, // never below a quarter of the bound
	} {
		if got := goMemoryLimit(c.bound, c.cache); got != c.want {
			t.Errorf("bound %d, cache %d: Go limit %d, want %d", c.bound, c.cache, got, c.want)
		}
	}

	// The FUSE server may hold nodes for a quarter of it: 34,816 with the chart's defaults.
	if got := nodeBudget(224<<20, 64<<20); got != 34816 || nodeBudget(0, 64<<20) != 0 {
		t.Errorf("node budget for a 224 MiB bound = %d, want 34816 (and none unbounded)", got)
	}
	// The engine may keep directories for an eighth of it: 17 MiB with the chart's defaults.
	if got := dirCacheBytes(224<<20, 64<<20); got != 17<<20 || dirCacheBytes(0, 64<<20) != 0 {
		t.Errorf("directory cache for a 224 MiB bound = %d, want %d (and 0 unbounded)", got, 17<<20)
	}
	// The check before serving may hold three quarters of the runtime's limit.
	if got, want := checkMemory(224<<20), int64(150<<20); got != want || checkMemory(0) != 0 {
		t.Errorf("check memory for a 224 MiB bound = %d, want %d (and 0 unbounded: %d)", got, want, checkMemory(0))
	}

	debug.SetMemoryLimit(math.MaxInt64)
	socket, _ := start(t)
	status := func() *protocol.Memory {
		t.Helper()
		resp, err := protocol.Call(dial(t, socket), &protocol.Request{Op: protocol.OpMemory}, 5*time.Second)
		if err != nil || resp.Memory == nil {
			t.Fatalf("memory = %+v, %v", resp, err)
		}
		return resp.Memory
	}
	if m := status(); m.Bound != 0 || m.GoLimit != 0 || m.Resident <= 0 {
		t.Errorf("unbounded: %+v, want no bound nor limit and the resident memory", m)
	}
	f := image(t)
	const bound = 200 << 20
	if _, err := protocol.Call(dial(t, socket), &protocol.Request{Op: protocol.OpCheck, Volume: "v", Check: &protocol.CheckArgs{MemoryLimit: bound}},
		10*time.Second, int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != goMemoryLimit(bound, 0) {
		t.Errorf("Go limit after a check held to %d: %d, want %d", bound, got, goMemoryLimit(bound, 0))
	}
	if m := status(); m.Bound != bound || m.GoLimit != goMemoryLimit(bound, 0) || m.Resident <= 0 {
		t.Errorf("held to %d: %+v", bound, m)
	}
}
