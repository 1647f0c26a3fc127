package fatvol_test

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
)

// TestCrashRenameOverThenOn replays what FATVOL_CRASH_SEED=1796670324943059268 found in the mixed
// workload: a durable file renamed over a durable target in another directory (m2 -> d/m3), then
// that name renamed on over a target in the root before anything else touched it. The second
// rename moves the file now at d/m3, m2's; the old d/m3 went with the first rename. The harness
// once followed the old target's content to the third name, so a cut after the second rename
// (d/m3 gone, m2's bytes under the long name) read as a file under none of its names.
func TestCrashRenameOverThenOn(t *testing.T) {
	requireTools(t, "mkfs.fat", "fsck.fat")
	for _, spec := range crashVolumes {
		t.Run(spec.name, func(t *testing.T) {
			for _, mode := range crashModes {
				t.Run(mode.name, func(t *testing.T) {
					rnd := rand.New(rand.NewPCG(1796670324943059268, 1))
					var moved []byte
					done := -1
					w := crashWorkload{name: "rename-over-then-on", setup: func(r *crashRun) {
						r.mkdir("d")
						r.create("d/m3", r.data(5820))
						moved = r.data(2134)
						r.create("m2", moved)
						r.create(longName(2), r.data(1497))
					}, run: func(r *crashRun) {
						r.rename("m2", "d/m3")
						r.rename("d/m3", longName(2))
						done = r.pos()
						r.unmount()
					}}
					r, log := recordCrashWorkload(t, spec, mode.opts, w, rnd)

					// The failing cut: every write up to the end of the second rename on the
					// medium, so the file is under the long name only.
					p := crashPoint{k: done, keep: slices.Repeat([]bool{true}, len(log.window(done)))}
					dev := newCrashLog(log.durable, log.ops).at(p)
					v, err := fatvol.Open(dev, fatvol.Options{ReadOnly: true, Logger: quietLogger})
					if err != nil {
						t.Fatal(err)
					}
					_, errOld := v.Stat("d/m3")
					got, errNew := readAllFrom(v, longName(2))
					v.Close()
					if errOld == nil || errNew != nil || !slices.Equal(got, moved) {
						t.Fatalf("%s: not the state the seed failed on (d/m3: %v; the long name: %v, %d bytes, m2's: %v)",
							p, errOld, errNew, len(got), slices.Equal(got, moved))
					}
					var tally crashTally
					_, fails := checkCrashPoint(r, p, dev, &tally)
					fails = append(fails, fsckFatAtCut(dev, filepath.Join(t.TempDir(), "cut.img"), false, false)...)
					if len(fails) > 0 {
						t.Errorf("%s:\n  %s", p, strings.Join(fails, "\n  "))
					}

					// And every other cut of the two renames, as the harness judges them.
					for _, p := range everyCrashPoint(log, rnd, 16) {
						if _, fails := checkCrashPoint(r, p, log.at(p), &tally); len(fails) > 0 {
							t.Errorf("%s:\n  %s", p, strings.Join(fails, "\n  "))
						}
					}
				})
			}
		})
	}
}
