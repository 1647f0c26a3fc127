package fsck

import (
	"io"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// memDev is a read-only in-memory Device, so that many mutated images can be checked quickly.
// The embedded interface stays nil: Check only reads, and methods added to Device later do not
// break the build.
type memDev struct {
	blockdev.Device
	b []byte
}

var _ blockdev.Device = (*memDev)(nil)

func (m *memDev) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
func (m *memDev) Size() int64 { return int64(len(m.b)) }

// TestHostileMutations scribbles random bytes over the metadata of a populated image (boot
// sector, FATs, directories) many times: Check must never panic, must finish quickly, and
// must reach fsck.fat -n's verdict on a sample of them.
func TestHostileMutations(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy", "mshowfat")
	for _, fatType := range []string{"16", "32"} {
		t.Run("FAT"+fatType, func(t *testing.T) {
			v := makeVol(t, fatType)
			orig, err := os.ReadFile(v.img)
			if err != nil {
				t.Fatal(err)
			}
			// Metadata: everything up to the data area plus the first clusters, where mcopy put
			// the directories and files.
			metaEnd := v.g.FirstDataSector*int64(v.g.SectorSize) + 64*int64(v.g.ClusterSize)
			rng := rand.New(rand.NewSource(int64(len(fatType)) * 7))
			iterations := 400
			if testing.Short() {
				iterations = 50
			}
			img := append([]byte(nil), orig...)
			dev := &memDev{b: img}
			for i := 0; i < iterations; i++ {
				type change struct {
					off int64
					old byte
				}
				var changes []change
				for n := 1 + rng.Intn(8); n > 0; n-- {
					off := rng.Int63n(metaEnd)
					changes = append(changes, change{off, img[off]})
					img[off] = byte(rng.Intn(256))
				}
				start := time.Now()
				rep, err := Check(dev)
				if d := time.Since(start); d > 5*time.Second {
					t.Fatalf("iteration %d: Check took %v", i, d)
				}
				if err == nil && rep == nil {
					t.Fatalf("iteration %d: nil report without error", i)
				}
				if i%20 == 0 {
					// Compare the verdict with fsck.fat on a sample.
					path := t.TempDir() + "/m.img"
					if err := os.WriteFile(path, img, 0o644); err != nil {
						t.Fatal(err)
					}
					ref := runFsckFat(t, path)
					ours := err == nil && rep.Clean()
					if ours != ref.clean() {
						var mine string
						if rep != nil {
							mine = listProblems(rep)
						}
						t.Errorf("iteration %d: ours clean=%v (err %v), fsck.fat -n exits %d\nours:\n%sfsck.fat:\n%s", i, ours, err, ref.code, mine, ref.out)
					}
				}
				for j := len(changes) - 1; j >= 0; j-- {
					img[changes[j].off] = changes[j].old
				}
			}
		})
	}
}

// TestDirectoryAndRootCycles makes directory chains loop (a subdirectory's chain onto itself,
// the FAT32 root's chain onto itself): the walk must end and report the cycle.
func TestDirectoryAndRootCycles(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy", "mshowfat")
	v := makeVol(t, "32")
	t.Run("root", func(t *testing.T) {
		w := *v
		w.img = copyImage(t, v.img)
		root := w.g.RootCluster
		w.setFAT(t, root, root)
		rep, err := checkImage(t, w.img)
		if err != nil {
			t.Fatal(err)
		}
		p := findProblem(t, rep, ChainCycle)
		if p.Path != "/" || p.Cluster != root {
			t.Errorf("got %s (cluster %d), want the root's cycle at cluster %d", p, p.Cluster, root)
		}
		if ref := runFsckFat(t, w.img); ref.clean() || rep.Clean() {
			t.Errorf("clean: ours %v, fsck.fat exit %d", rep.Clean(), ref.code)
		}
	})
	t.Run("subdirectory", func(t *testing.T) {
		w := *v
		w.img = copyImage(t, v.img)
		d := chainOf(t, w.img, "/D1/D2")[0]
		w.setFAT(t, d, d)
		rep, err := checkImage(t, w.img)
		if err != nil {
			t.Fatal(err)
		}
		p := findProblem(t, rep, ChainCycle)
		if p.Path != "/D1/D2" || p.Cluster != d {
			t.Errorf("got %s (cluster %d), want /D1/D2's cycle at cluster %d", p, p.Cluster, d)
		}
		ref := runFsckFat(t, w.img)
		if ref.clean() || rep.Clean() {
			t.Errorf("clean: ours %v, fsck.fat exit %d", rep.Clean(), ref.code)
		}
	})
}
