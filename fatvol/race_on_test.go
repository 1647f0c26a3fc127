//go:build race

package fatvol_test

// raceEnabled: the race detector slows the crash harness' replays tenfold and finds nothing in
// them (each cut is checked on one goroutine), so under it the harness takes fewer cuts; .ci/run
// runs the full default harness without it.
const raceEnabled = true
