package fatvol_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/internal/judge"
)

// growSpec is a growable volume: formatted at size with FATs for maxSize.
type growSpec struct {
	name          string
	fatType       ondisk.FATType
	size, maxSize int64
}

var growSpecs = []growSpec{
	{"FAT12", ondisk.FAT12, 1 << 20, 4 << 20},
	{"FAT16", ondisk.FAT16, 8 << 20, 48 << 20},
	{"FAT32", ondisk.FAT32, 36 << 20, 48 << 20},
}

// formatGrowable makes an image of spec.size formatted by mkfs with room for spec.maxSize.
func formatGrowable(t testing.TB, spec growSpec) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "grow.img")
	dev, err := blockdev.CreateImage(img, spec.size)
	if err != nil {
		t.Fatal(err)
	}
	g, err := mkfs.Format(dev, mkfs.Options{FATType: spec.fatType, MaxSize: spec.maxSize})
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("format %s: %v", spec.name, err)
	}
	if g.Type != spec.fatType {
		t.Fatalf("format %s: got %s", spec.name, g.Type)
	}
	return img
}

// growTo grows the image file under the open volume to size bytes and the volume with it.
func growTo(t testing.TB, v *fatvol.Volume, img string, size int64) (int64, error) {
	t.Helper()
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Device().(*blockdev.File).UpdateSize(); err != nil {
		t.Fatal(err)
	}
	return v.Grow()
}

// sizeForClusters is the image size whose data area has exactly n clusters.
func sizeForClusters(g ondisk.Geometry, n int64) int64 {
	return (g.FirstDataSector + n*int64(g.SectorsPerCluster)) * int64(g.SectorSize)
}

// fatSectorCrossing is the first cluster after c whose FAT entry starts in, or runs into,
// another FAT sector than the entry before it.
func fatSectorCrossing(g ondisk.Geometry, c uint32) uint32 {
	bits := int64(g.Type)
	for ; ; c++ {
		start, end := int64(c)*bits/8, (int64(c+1)*bits-1)/8
		if start/int64(g.SectorSize) != end/int64(g.SectorSize) || start%int64(g.SectorSize) == 0 {
			return c
		}
	}
}

// TestGrowInUse grows volumes of every FAT type while a file is open and being written: first
// filled to the last cluster of the old size, then grown by one cluster plus a partial one, to a
// FAT entry that starts a FAT sector (or straddles two, on FAT12), and to the limit of the
// FATs' room, the file growing into the new clusters each time. After each growth statfs shows
// the new size at once; after each step fsck.fat -n and our checker find the volume clean,
// minfo reads the new size, and mcopy reads the file back through the chain across the old end.
// At the limit, mcopy writes a file into the new space, and growth one cluster further is
// refused with nothing written.
func TestGrowInUse(t *testing.T) {
	requireTools(t, "fsck.fat", "minfo", "mcopy", "mdir")
	for _, spec := range growSpecs {
		t.Run(spec.name, func(t *testing.T) {
			img := formatGrowable(t, spec)
			v := openVolume(t, img)
			g := v.Geometry()
			limit := g.MaxGrowSectors() * int64(g.SectorSize)
			if limit < spec.maxSize-int64(g.ClusterSize) {
				t.Fatalf("room for %d bytes, want %d", limit, spec.maxSize)
			}
			r := rand.New(rand.NewPCG(1, uint64(spec.fatType)))
			var want []byte
			f, err := v.OpenFile("DATA.BIN", os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			fill := func() {
				t.Helper()
				st, err := v.StatFS()
				if err != nil {
					t.Fatal(err)
				}
				chunk := randomBytes(r, int(st.FreeClusters)*st.ClusterSize)
				if _, err := f.WriteAt(chunk, int64(len(want))); err != nil {
					t.Fatalf("write into the free clusters: %v", err)
				}
				want = append(want, chunk...)
				if st, _ := v.StatFS(); st.FreeClusters != 0 {
					t.Fatalf("%d clusters left free after filling", st.FreeClusters)
				}
			}
			fill() // the old size's last cluster is in the file
			var steps []int64
			steps = append(steps, sizeForClusters(g, int64(g.Clusters)+1)+int64(g.SectorSize)*int64(g.SectorsPerCluster-1)+int64(g.SectorSize)/2)
			cross := fatSectorCrossing(g, g.Clusters+3)
			steps = append(steps, sizeForClusters(g, int64(cross)-1)) // cluster cross is the last one
			steps = append(steps, limit)
			for i, size := range steps {
				got, err := growTo(t, v, img, size)
				if err != nil {
					t.Fatalf("step %d: grow to %d: %v", i, size, err)
				}
				wantTotal := size / int64(g.SectorSize) * int64(g.SectorSize)
				if got != wantTotal {
					t.Fatalf("step %d: grew to %d bytes, want %d", i, got, wantTotal)
				}
				ng := v.Geometry()
				st, err := v.StatFS()
				if err != nil {
					t.Fatal(err)
				}
				wantClusters := uint32((wantTotal/int64(g.SectorSize) - g.FirstDataSector) / int64(g.SectorsPerCluster))
				if ng.Clusters != wantClusters || st.TotalClusters != wantClusters {
					t.Fatalf("step %d: %d clusters (statfs %d), want %d", i, ng.Clusters, st.TotalClusters, wantClusters)
				}
				if i == len(steps)-1 {
					break // the last room is for mcopy
				}
				fill()
				if err := v.Sync(); err != nil {
					t.Fatal(err)
				}
				if err := judge.Check(img, fsck.Dirty); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				out := filepath.Join(t.TempDir(), "out")
				mtools(t, img, "mcopy", "-n", "::DATA.BIN", out)
				if back, err := os.ReadFile(out); err != nil || !bytes.Equal(back, want) {
					t.Fatalf("step %d: mcopy read %d bytes back (err %v), want the %d written", i, len(back), err, len(want))
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			closeVolume(t, v)
			checkClean(t, img)
			if info := mtools(t, img, "minfo", "::"); !strings.Contains(info, sizeLine(limit/int64(g.SectorSize))) {
				t.Fatalf("minfo does not show %d sectors:\n%s", limit/int64(g.SectorSize), info)
			}
			// mtools fills the new space: only the new clusters are free.
			host := filepath.Join(t.TempDir(), "NEW.BIN")
			extra := randomBytes(r, int(limit/int64(g.SectorSize)-g.FirstDataSector)/g.SectorsPerCluster*g.ClusterSize-len(want)-g.ClusterSize)
			if err := os.WriteFile(host, extra, 0o644); err != nil {
				t.Fatal(err)
			}
			mtools(t, img, "mcopy", host, "::NEW.BIN")
			checkClean(t, img)
			if !strings.Contains(mtools(t, img, "mdir", "::"), "NEW") {
				t.Fatal("mdir does not list NEW.BIN")
			}
			v = openVolume(t, img)
			if got := readVolumeFile(t, v, "NEW.BIN"); !bytes.Equal(got, extra) {
				t.Fatal("NEW.BIN written by mcopy into the new space reads back different")
			}
			if got := readVolumeFile(t, v, "DATA.BIN"); !bytes.Equal(got, want) {
				t.Fatal("DATA.BIN reads back different")
			}
			// One cluster past the room: refused, nothing written.
			before := prefixSum(t, img, limit)
			if _, err := growTo(t, v, img, limit+int64(g.ClusterSize)); !errors.Is(err, fatvol.ErrGrowLimit) {
				t.Fatalf("grow past the room: %v, want ErrGrowLimit", err)
			}
			if after := prefixSum(t, img, limit); after != before {
				t.Fatal("a refused growth changed the image")
			}
			closeVolume(t, v)
			checkClean(t, img)
		})
	}
}

// sizeLine is how minfo prints a volume's total sectors.
func sizeLine(sectors int64) string {
	if sectors < 1<<16 {
		return "small size: " + strconv.FormatInt(sectors, 10) + " sectors"
	}
	return "big size: " + strconv.FormatInt(sectors, 10) + " sectors"
}

// prefixSum is the checksum of the image's first n bytes.
func prefixSum(t testing.TB, img string, n int64) [32]byte {
	t.Helper()
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data[:min(n, int64(len(data)))])
}

// TestGrowTypeLimit grows a FAT12 volume whose FATs have entries for more clusters than FAT12
// allows: it grows to 4084 clusters (fsck.fat and mtools agree it is FAT12), and one cluster more
// is refused, naming the type's limit, with nothing written.
func TestGrowTypeLimit(t *testing.T) {
	requireTools(t, "fsck.fat", "mdir")
	img := formatGrowable(t, growSpec{"FAT12", ondisk.FAT12, 1 << 20, 8<<20 - 64<<10})
	v := openVolume(t, img)
	g := v.Geometry()
	if entries := g.FATBytes()*8/12 - 2; entries <= ondisk.MaxClustersFAT12 {
		t.Fatalf("the FATs have %d entries: not past FAT12's limit, the test needs more", entries)
	}
	atLimit := sizeForClusters(g, ondisk.MaxClustersFAT12)
	if got := g.MaxGrowSectors() * int64(g.SectorSize); got != atLimit+int64(g.ClusterSize)-int64(g.SectorSize) {
		t.Fatalf("room up to %d bytes, want FAT12's limit %d (and a partial cluster)", got, atLimit)
	}
	if _, err := growTo(t, v, img, atLimit); err != nil {
		t.Fatalf("grow to FAT12's limit: %v", err)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	before := prefixSum(t, img, atLimit)
	_, err := growTo(t, v, img, atLimit+int64(g.ClusterSize))
	if !errors.Is(err, fatvol.ErrGrowLimit) || !strings.Contains(err.Error(), "FAT12 allows 4084") {
		t.Fatalf("grow past FAT12's limit: %v, want ErrGrowLimit naming it", err)
	}
	if prefixSum(t, img, atLimit) != before {
		t.Fatal("a refused growth changed the image")
	}
	writeVolumeFile(t, v, "LAST.BIN", bytes.Repeat([]byte{7}, 64<<10))
	closeVolume(t, v)
	checkClean(t, img)
	mtools(t, img, "mdir", "::LAST.BIN")
	if sum := fsckSummary(t, img); !strings.HasSuffix(sum, "/4084 clusters") {
		t.Fatalf("fsck.fat: %s, want 4084 clusters", sum)
	}
}
