package fuzzimage

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// HangLimit is how long one fuzz input may run before Watchdog calls it a hang. It is far above
// what any input of MaxDeviceSize needs (milliseconds), so only a loop that does not end trips
// it, even on a loaded machine.
const HangLimit = 60 * time.Second

// Watchdog crashes the process, printing every goroutine's stack, when the returned stop is not
// called within HangLimit: the fuzzer then records the input as a crasher. Go's fuzzer has no
// time limit of its own for one input.
func Watchdog(what string) (stop func()) {
	timer := time.AfterFunc(HangLimit, func() {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "%s: no return after %v\n%s\n", what, HangLimit, buf[:n])
		panic(fmt.Sprintf("%s: no return after %v", what, HangLimit))
	})
	return func() { timer.Stop() }
}

// AllocBudget measures the bytes allocated while a fuzz input runs (the fuzzer runs one input at
// a time per process, so the count is the input's).
type AllocBudget struct{ start uint64 }

// StartAllocs begins counting.
func StartAllocs() AllocBudget {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return AllocBudget{start: m.TotalAlloc}
}

// Check fails t when more than limit bytes were allocated since StartAllocs.
func (a AllocBudget) Check(t testing.TB, limit int64) {
	t.Helper()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if used := int64(m.TotalAlloc - a.start); used > limit {
		t.Fatalf("allocated %d bytes, more than the %d bytes allowed for this image", used, limit)
	}
}
