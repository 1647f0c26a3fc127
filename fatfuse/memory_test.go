package fatfuse

import (
	"runtime/debug"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
)

// TestLimitMemory: the limit is the cache bound plus the headroom, and GOMEMLIMIT, when set,
// wins.
func TestLimitMemory(t *testing.T) {
	needTools(t, "mkfs.fat")
	img := makeImage(t, 16384, "-F", "16")
	vol, err := fatvol.OpenImage(img, fatvol.Options{ReadOnly: true, CacheBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)

	t.Setenv("GOMEMLIMIT", "")
	if got, want := LimitMemory(vol), int64(8<<20+memoryHeadroom); got != want {
		t.Errorf("LimitMemory: %d, want %d", got, want)
	}
	if got := debug.SetMemoryLimit(-1); got != 8<<20+memoryHeadroom {
		t.Errorf("runtime memory limit %d after LimitMemory, want %d", got, 8<<20+memoryHeadroom)
	}

	debug.SetMemoryLimit(1 << 40)
	t.Setenv("GOMEMLIMIT", "1TiB")
	if got := LimitMemory(vol); got != 1<<40 {
		t.Errorf("LimitMemory with GOMEMLIMIT set: %d, want it left at %d", got, int64(1<<40))
	}
}
