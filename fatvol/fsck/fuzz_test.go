package fsck

import (
	"path/filepath"
	"testing"

	"github.com/csi-fat/csi-fat/internal/fuzzimage"
)

// FuzzCheck runs the checker on any image: it must return, within bounded memory, a report or an
// error, never both missing, and never list more problems than its limit.
func FuzzCheck(f *testing.F) {
	for _, s := range fuzzimage.MkfsSeeds(f) {
		f.Add(s.Image)
	}
	images, _ := fuzzimage.DosfstoolsSeeds(f, filepath.Join("..", "..", "..", "shared", "dosfstools-tests"))
	for _, s := range images {
		f.Add(s.Image)
	}
	f.Fuzz(func(t *testing.T, image []byte) {
		defer fuzzimage.Watchdog("FuzzCheck")()
		allocs := fuzzimage.StartAllocs()
		dev := fuzzimage.NewDevice(image)
		rep, err := Check(dev)
		if err == nil {
			if rep == nil {
				t.Fatal("no report and no error")
			}
			if len(rep.Problems) > maxProblems {
				t.Fatalf("%d problems listed, limit %d", len(rep.Problems), maxProblems)
			}
		}
		allocs.Check(t, 64*dev.Size()+64<<20)
	})
}
