package fatfuse

import (
	"runtime/debug"
	"testing"
)

// TestSoleVolumeGC: the collector runs at soleVolumeGCPercent, unless GOGC says otherwise.
func TestSoleVolumeGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)

	t.Setenv("GOGC", "")
	if got := SoleVolumeGC(); got != soleVolumeGCPercent {
		t.Errorf("SoleVolumeGC: %d, want %d", got, soleVolumeGCPercent)
	}
	if got := debug.SetGCPercent(100); got != soleVolumeGCPercent {
		t.Errorf("GOGC after SoleVolumeGC: %d, want %d", got, soleVolumeGCPercent)
	}

	t.Setenv("GOGC", "200")
	debug.SetGCPercent(200)
	if got := SoleVolumeGC(); got != 200 {
		t.Errorf("SoleVolumeGC with GOGC=200: %d, want it left at 200", got)
	}
}
