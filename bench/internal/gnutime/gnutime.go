// Package gnutime measures a command's peak resident memory and times under GNU time, for the
// benchmarks that compare csi-fat's memory with another tool's.
package gnutime

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Measure runs argv under GNU time, whose small process forks it: a child of the benchmark's
// own process would report the benchmark's resident memory as its own peak (Linux keeps the
// high-water mark of the forked copy across exec). It returns the peak resident memory in KiB,
// the wall time and the CPU time (user and system).
func Measure(argv []string) (rss int64, wall, cpu time.Duration, err error) {
	f, err := os.CreateTemp("", "gnutime")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.Remove(f.Name())
	f.Close()
	cmd := exec.Command("/usr/bin/time", append([]string{"-f", "%M %e %U %S", "-o", f.Name()}, argv...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, 0, 0, fmt.Errorf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, 0, 0, err
	}
	var e, u, s float64
	if _, err := fmt.Sscanf(string(b), "%d %f %f %f", &rss, &e, &u, &s); err != nil {
		return 0, 0, 0, fmt.Errorf("GNU time's answer %q: %v", b, err)
	}
	return rss, time.Duration(e * float64(time.Second)), time.Duration((u + s) * float64(time.Second)), nil
}
