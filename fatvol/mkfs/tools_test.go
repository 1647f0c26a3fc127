package mkfs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// invariantTime is the creation time mkfs.fat --invariant stamps on the label entry (in UTC).
var invariantTime = time.Unix(1426325213, 0).UTC()

// needTools skips the test when one of the real tools it compares against is missing.
func needTools(t *testing.T, names ...string) {
	t.Helper()
	testenv.RequireTool(t, names...)
}

// run executes a tool and returns its combined output and whether it exited 0.
func run(t *testing.T, name string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return string(out), err == nil
}

// stdout runs a tool that must succeed and returns its standard output alone.
func stdout(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("%s %v: %v", name, args, err)
	}
	return string(out)
}

// sparseFile creates an empty sparse file of size bytes.
func sparseFile(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// formatImage runs our Format on a fresh sparse image of size bytes.
func formatImage(t *testing.T, path string, size int64, opts mkfs.Options) (ondisk.Geometry, error) {
	t.Helper()
	dev, err := blockdev.CreateImage(path, size)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	return mkfs.Format(dev, opts)
}

// readBootSector parses the boot sector of an image.
func readBootSector(t *testing.T, path string) *ondisk.BootSector {
	t.Helper()
	p := readRange(t, path, 0, 512)
	bs, err := ondisk.ParseBootSector(p)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return bs
}

func readRange(t *testing.T, path string, off, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, n)
	if _, err := f.ReadAt(p, off); err != nil {
		t.Fatalf("%s: read %d bytes at %d: %v", path, n, off, err)
	}
	return p
}

// fieldDiffs lists the boot sector fields that differ, by name.
func fieldDiffs(ours, theirs *ondisk.BootSector) []string {
	a, b := reflect.ValueOf(*ours), reflect.ValueOf(*theirs)
	var d []string
	for i := range a.NumField() {
		if fa, fb := a.Field(i).Interface(), b.Field(i).Interface(); !reflect.DeepEqual(fa, fb) {
			d = append(d, fmt.Sprintf("%s: ours %v, mkfs.fat %v", a.Type().Field(i).Name, fa, fb))
		}
	}
	return d
}

// compareMetadata compares two images byte for byte over every region mkfs writes: reserved
// area, all FATs and the root directory (the root cluster on FAT32), naming the region of the
// first difference. patchTheirs, if not nil, applies a known difference to mkfs.fat's bytes.
func compareMetadata(t *testing.T, ours, theirs string, g ondisk.Geometry, patchTheirs func([]byte)) {
	t.Helper()
	ss := int64(g.SectorSize)
	end := g.FirstDataSector * ss
	if g.Type == ondisk.FAT32 {
		end += int64(g.ClusterSize)
	}
	a, b := readRange(t, ours, 0, end), readRange(t, theirs, 0, end)
	if patchTheirs != nil {
		patchTheirs(b)
	}
	if bytes.Equal(a, b) {
		return
	}
	for i := range a {
		if a[i] != b[i] {
			sector := int64(i) / ss
			region := "data area"
			switch {
			case sector == 0:
				region = "boot sector"
			case sector < g.ReservedSectors:
				region = "reserved area"
			case sector < g.RootDirSector:
				region = fmt.Sprintf("FAT %d", (sector-g.ReservedSectors)/g.FATSectors)
			case sector < g.FirstDataSector:
				region = "root directory"
			}
			t.Errorf("metadata differs first at byte %d (sector %d, %s): ours %#02x, mkfs.fat %#02x", i, sector, region, a[i], b[i])
			return
		}
	}
}

// fsckOutput runs fsck.fat -n and returns its output without the version banner, with the
// image path replaced by IMG so two images' reports compare.
func fsckOutput(t *testing.T, img string) (string, bool) {
	t.Helper()
	out, ok := run(t, "fsck.fat", "-n", img)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "fsck.fat ") {
			continue
		}
		lines = append(lines, strings.ReplaceAll(l, img, "IMG"))
	}
	return strings.Join(lines, "\n"), ok
}

// repoRoot finds the module root from the test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}
