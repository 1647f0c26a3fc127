package fsck

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// needTools skips the test when the reference tools are missing.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	testenv.RequireTool(t, tools...)
}

// run runs a command and fails the test if it does not exit 0.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1", "LC_ALL=C.UTF-8")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// fsckFat is `fsck.fat -n` on img: its exit code and output.
type fsckFat struct {
	code int
	out  string
}

func (r fsckFat) clean() bool { return r.code == 0 }

var summaryRE = regexp.MustCompile(`: (\d+) files, (\d+)/(\d+) clusters\n`)

// summary parses fsck.fat's last line: files, used and total clusters.
func (r fsckFat) summary() (files, used, total int, ok bool) {
	m := summaryRE.FindStringSubmatch(r.out)
	if m == nil {
		return 0, 0, 0, false
	}
	files, _ = strconv.Atoi(m[1])
	used, _ = strconv.Atoi(m[2])
	total, _ = strconv.Atoi(m[3])
	return files, used, total, true
}

func runFsckFat(t *testing.T, img string) fsckFat {
	t.Helper()
	return runFsckFatMode(t, "-n", img)
}

// runFsckFatMode runs fsck.fat with mode (-n, -a) on img and returns its exit code and output;
// it fails the test only when fsck.fat could not run.
func runFsckFatMode(t *testing.T, mode, img string) fsckFat {
	t.Helper()
	cmd := exec.Command("fsck.fat", mode, img)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return fsckFat{0, string(out)}
	case errors.As(err, &exit):
		return fsckFat{exit.ExitCode(), string(out)}
	}
	t.Fatalf("fsck.fat %s %s: %v", mode, img, err)
	return fsckFat{}
}

// checkImage runs Check on an image file.
func checkImage(t *testing.T, img string) (*Report, error) {
	t.Helper()
	dev, err := blockdev.Open(img, true)
	if err != nil {
		t.Fatalf("open %s: %v", img, err)
	}
	defer dev.Close()
	return Check(dev)
}

// mkfsImage creates a sparse image of size bytes with mkfs.fat and the given options.
func mkfsImage(t *testing.T, size int64, opts ...string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "vol.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run(t, "mkfs.fat", append(opts, img)...)
	return img
}

// mcopyTree copies the contents of dir into the image root with mtools.
func mcopyTree(t *testing.T, img, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-s", "-i", img}
	for _, e := range entries {
		args = append(args, filepath.Join(dir, e.Name()))
	}
	run(t, "mcopy", append(args, "::/")...)
}

// writeFile creates a host file of n pseudo-random bytes (deterministic per name).
func writeFile(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	x := uint32(len(path)*7919 + n)
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

var rangeRE = regexp.MustCompile(`(\d+)(?:-(\d+))?`)

// chainOf asks mtools' mshowfat for the clusters of a file in the image.
func chainOf(t *testing.T, img, path string) []uint32 {
	t.Helper()
	out := run(t, "mshowfat", "-i", img, "::"+path)
	i := strings.LastIndex(out, "<")
	j := strings.LastIndex(out, ">")
	if i < 0 || j < i {
		t.Fatalf("mshowfat %s: unexpected output %q", path, out)
	}
	var chain []uint32
	for _, m := range rangeRE.FindAllStringSubmatch(out[i+1:j], -1) {
		a, _ := strconv.Atoi(m[1])
		b := a
		if m[2] != "" {
			b, _ = strconv.Atoi(m[2])
		}
		for c := a; c <= b; c++ {
			chain = append(chain, uint32(c))
		}
	}
	return chain
}

// entryOffset finds the 32-byte short directory entry named name (11 bytes, space padded) in
// the image by its bytes; exactly one must exist.
func entryOffset(t *testing.T, img []byte, name string) int64 {
	t.Helper()
	if len(name) != 11 {
		t.Fatalf("short name %q is not 11 bytes", name)
	}
	var found []int64
	for off := 0; off+32 <= len(img); off += 32 {
		if string(img[off:off+11]) == name && img[off+11] != 0x0F {
			found = append(found, int64(off))
		}
	}
	if len(found) != 1 {
		t.Fatalf("short entry %q found %d times", name, len(found))
	}
	return found[0]
}

// patchImage reads the whole image, lets fn change it, and writes it back.
func patchImage(t *testing.T, img string, fn func(b []byte)) {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	fn(b)
	if err := os.WriteFile(img, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyImage copies an image file to a new temporary path.
func copyImage(t *testing.T, img string) string {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy.img")
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// findProblem returns the first problem of kind k, or fails listing what was found.
func findProblem(t *testing.T, rep *Report, k Kind) Problem {
	t.Helper()
	for _, p := range rep.Problems {
		if p.Kind == k {
			return p
		}
	}
	t.Fatalf("no %v problem; found:\n%s", k, listProblems(rep))
	return Problem{}
}

func listProblems(rep *Report) string {
	var b bytes.Buffer
	for _, p := range rep.Problems {
		fmt.Fprintf(&b, "  [%v %v] %s\n", p.Kind, p.Severity, p)
	}
	return b.String()
}

// sameSummary asserts that the report's counts equal fsck.fat's summary line.
func sameSummary(t *testing.T, rep *Report, ref fsckFat) {
	t.Helper()
	files, used, total, ok := ref.summary()
	if !ok {
		t.Fatalf("no summary line in fsck.fat output:\n%s", ref.out)
	}
	if rep.Files+rep.Dirs != files || int(rep.UsedClusters) != used || int(rep.Clusters) != total {
		t.Errorf("counts: ours %d files, %d/%d clusters; fsck.fat %d files, %d/%d clusters",
			rep.Files+rep.Dirs, rep.UsedClusters, rep.Clusters, files, used, total)
	}
}
