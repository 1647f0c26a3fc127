package fatvol_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/internal/judge"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// The tests judge the engine with the reference tools: images come from dosfstools' mkfs.fat,
// every volume the engine wrote must pass fsck.fat -n, and what the engine writes must read back
// the same through mtools (and the other way round).

// volumeSpec is an image the tests format with mkfs.fat.
type volumeSpec struct {
	name string
	size int64
	args []string // mkfs.fat options before the image path
}

var (
	fat12Small = volumeSpec{"FAT12-1MiB", 1 << 20, []string{"-F", "12"}}
	fat12      = volumeSpec{"FAT12-4MiB", 4 << 20, []string{"-F", "12"}}
	fat16      = volumeSpec{"FAT16-64MiB", 64 << 20, []string{"-F", "16"}}
	fat32      = volumeSpec{"FAT32-64MiB", 64 << 20, []string{"-F", "32"}}
	fat32Big   = volumeSpec{"FAT32-512MiB", 512 << 20, []string{"-F", "32"}}
)

// requireTools skips the test when a reference tool is not installed.
func requireTools(t testing.TB, tools ...string) {
	t.Helper()
	testenv.RequireTool(t, tools...)
}

// makeImage formats a new sparse image with mkfs.fat and returns its path.
func makeImage(t testing.TB, spec volumeSpec) string {
	t.Helper()
	requireTools(t, "mkfs.fat", "fsck.fat")
	img := filepath.Join(t.TempDir(), "vol.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(spec.size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	args := append(append([]string{}, spec.args...), img)
	if out, err := exec.Command("mkfs.fat", args...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return img
}

// openVolume opens img read-write and closes it at the end of the test if the test did not.
func openVolume(t testing.TB, img string) *fatvol.Volume {
	t.Helper()
	return openVolumeWith(t, img, fatvol.Options{})
}

func openVolumeWith(t testing.TB, img string, opts fatvol.Options) *fatvol.Volume {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger
	}
	v, err := fatvol.OpenImage(img, opts)
	if err != nil {
		t.Fatalf("open %s: %v", img, err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func closeVolume(t testing.TB, v *fatvol.Volume) {
	t.Helper()
	if err := v.Close(); err != nil {
		t.Fatalf("close volume: %v", err)
	}
}

// checkClean requires the image to be a consistent file system: fsck.fat -n must exit 0 and say
// nothing beyond its banner and its one-line summary.
func checkClean(t testing.TB, img string) {
	t.Helper()
	requireTools(t, "fsck.fat")
	if err := judge.Check(img); err != nil {
		t.Fatal(err)
	}
}

// fsckSummary returns fsck.fat's summary line of a clean image, e.g. "12 files, 40/2036 clusters".
func fsckSummary(t testing.TB, img string) string {
	t.Helper()
	out, _ := exec.Command("fsck.fat", "-n", img).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, img+": ") {
			return strings.TrimPrefix(line, img+": ")
		}
	}
	t.Fatalf("fsck.fat -n %s printed no summary:\n%s", img, out)
	return ""
}

// mcopyTree copies everything in the host directory src into the image's root with mcopy.
func mcopyTree(t testing.TB, img, src string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-s", "-n"}
	for _, e := range entries {
		args = append(args, filepath.Join(src, e.Name()))
	}
	mtools(t, img, "mcopy", append(args, "::/")...)
}

// mtools runs an mtools command on img with a UTF-8 locale (mtools converts long names to the
// locale's charset) and returns its standard output.
func mtools(t testing.TB, img string, tool string, args ...string) string {
	t.Helper()
	requireTools(t, tool)
	full := append([]string{"-i", img}, args...)
	cmd := exec.Command(tool, full...)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "TZ=UTC", "MTOOLS_SKIP_CHECK=1", "MTOOLSRC=/dev/null")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", tool, strings.Join(full, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// tree is a file system's content: slash paths to file contents, and directories as paths
// mapped to nil in dirs.
type tree struct {
	files map[string][]byte
	dirs  map[string]bool
}

func newTree() *tree { return &tree{files: map[string][]byte{}, dirs: map[string]bool{}} }

// addFile records a file and its parent directories.
func (tr *tree) addFile(p string, data []byte) {
	tr.files[p] = data
	tr.addDir(path.Dir(p))
}

func (tr *tree) addDir(p string) {
	for p != "." && p != "/" && p != "" {
		tr.dirs[p] = true
		p = path.Dir(p)
	}
}

// sortedDirs returns the directories parents first.
func (tr *tree) sortedDirs() []string {
	var ds []string
	for d := range tr.dirs {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool {
		ci, cj := strings.Count(ds[i], "/"), strings.Count(ds[j], "/")
		if ci != cj {
			return ci < cj
		}
		return ds[i] < ds[j]
	})
	return ds
}

func (tr *tree) sortedFiles() []string {
	var fs []string
	for f := range tr.files {
		fs = append(fs, f)
	}
	sort.Strings(fs)
	return fs
}

// writeToVolume creates the tree on the volume through the engine.
func (tr *tree) writeToVolume(t testing.TB, v *fatvol.Volume) {
	t.Helper()
	for _, d := range tr.sortedDirs() {
		if err := v.Mkdir(d); err != nil {
			t.Fatalf("mkdir %q: %v", d, err)
		}
	}
	for _, p := range tr.sortedFiles() {
		f, err := v.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatalf("create %q: %v", p, err)
		}
		if n, err := f.Write(tr.files[p]); err != nil || n != len(tr.files[p]) {
			t.Fatalf("write %q: wrote %d of %d: %v", p, n, len(tr.files[p]), err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close %q: %v", p, err)
		}
	}
}

// writeToHost creates the tree under dir on the host.
func (tr *tree) writeToHost(t testing.TB, dir string) {
	t.Helper()
	for _, d := range tr.sortedDirs() {
		if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, data := range tr.files {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(p)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree reads a whole tree from an fs.FS (the volume, or os.DirFS of an mtools copy).
func readTree(t testing.TB, fsys fs.FS) *tree {
	t.Helper()
	tr := newTree()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if d.IsDir() {
			tr.dirs[p] = true
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		tr.files[p] = data
		return nil
	})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	return tr
}

// requireSameTree compares two trees, names byte for byte and contents byte for byte.
func requireSameTree(t testing.TB, what string, want, got *tree) {
	t.Helper()
	var problems []string
	for d := range want.dirs {
		if !got.dirs[d] {
			problems = append(problems, "missing directory "+quoteName(d))
		}
	}
	for d := range got.dirs {
		if !want.dirs[d] {
			problems = append(problems, "unexpected directory "+quoteName(d))
		}
	}
	for p, data := range want.files {
		g, ok := got.files[p]
		switch {
		case !ok:
			problems = append(problems, "missing file "+quoteName(p))
		case !bytes.Equal(g, data):
			problems = append(problems, "content differs: "+quoteName(p)+" "+describeDiff(data, g))
		}
	}
	for p := range got.files {
		if _, ok := want.files[p]; !ok {
			problems = append(problems, "unexpected file "+quoteName(p))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 30 {
			problems = append(problems[:30], "...")
		}
		t.Fatalf("%s: %d differences:\n%s", what, len(problems), strings.Join(problems, "\n"))
	}
}

func quoteName(s string) string { return strconv.Quote(s) }

func describeDiff(want, got []byte) string {
	if len(want) != len(got) {
		return "(size " + strconv.Itoa(len(got)) + ", want " + strconv.Itoa(len(want)) + ")"
	}
	for i := range want {
		if want[i] != got[i] {
			return "(first difference at byte " + strconv.Itoa(i) + ")"
		}
	}
	return ""
}

// randomBytes returns n deterministic pseudo-random bytes.
func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		u := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(u >> (8 * k))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// wantErrno requires err to carry errno want.
func wantErrno(t testing.TB, what string, err error, want syscall.Errno) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %v", what, want)
	}
	if got := fatvol.Errno(err); got != want {
		t.Fatalf("%s: %v (errno %d %v), want %v", what, err, int(got), got, want)
	}
	var pe *fs.PathError
	var le *os.LinkError
	if !errors.As(err, &pe) && !errors.As(err, &le) {
		t.Fatalf("%s: error %v (%T) is neither an *fs.PathError nor an *os.LinkError", what, err, err)
	}
}

// readVolumeFile reads a whole file through the engine.
func readVolumeFile(t testing.TB, v *fatvol.Volume, name string) []byte {
	t.Helper()
	f, err := v.Open(name)
	if err != nil {
		t.Fatalf("open %q: %v", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %q: %v", name, err)
	}
	return data
}

// writeVolumeFile creates or replaces a file through the engine.
func writeVolumeFile(t testing.TB, v *fatvol.Volume, name string, data []byte) {
	t.Helper()
	f, err := v.Create(name)
	if err != nil {
		t.Fatalf("create %q: %v", name, err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatalf("write %q: %v", name, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %q: %v", name, err)
	}
}

// clusterSize is the volume's cluster size as mkfs.fat chose it.
func clusterSize(t testing.TB, v *fatvol.Volume) int {
	t.Helper()
	st, err := v.StatFS()
	if err != nil {
		t.Fatal(err)
	}
	return st.ClusterSize
}

// quietLogger keeps the engine's open-time facts out of the test output.
var quietLogger = slog.New(slog.DiscardHandler)

var readOnlyOptions = fatvol.Options{ReadOnly: true}
