package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// mkfsResult is one run of the built csi-fat binary.
type mkfsResult struct {
	stdout, stderr string
	code           int
}

// runMkfsBinary runs "csi-fat mkfs ARGS" from the binary built for the test.
func runMkfsBinary(t *testing.T, bin string, args ...string) mkfsResult {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"mkfs"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("csi-fat mkfs %v: %v", args, err)
	}
	return mkfsResult{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

func mkfsBootSector(t *testing.T, path string) (*ondisk.BootSector, []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, 512)
	if _, err := f.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	bs, err := ondisk.ParseBootSector(p)
	if err != nil {
		t.Fatal(err)
	}
	return bs, p
}

// TestMkfsCommand builds csi-fat and runs its mkfs subcommand as a user would, comparing the
// volumes it makes with mkfs.fat's for the same flags.
func TestMkfsCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "csi-fat")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	_, errMkfsFat := exec.LookPath("mkfs.fat")
	_, errFsck := exec.LookPath("fsck.fat")

	t.Run("help documents every option", func(t *testing.T) {
		r := runMkfsBinary(t, bin, "--help")
		if r.code != 0 {
			t.Fatalf("--help exits %d", r.code)
		}
		for _, want := range []string{"-F", "-s", "-S", "-n", "-i", "-f", "-r", "-size", "-max-size", "PATH", "before PATH", "K, M, G, T"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("--help does not mention %q:\n%s", want, r.stderr)
			}
		}
	})

	t.Run("same volume as mkfs.fat", func(t *testing.T) {
		if errMkfsFat != nil || errFsck != nil {
			testenv.RequireTool(t, "mkfs.fat", "fsck.fat")
		}
		for _, c := range []struct {
			size  string
			bytes int64
			flags []string
		}{
			{"1440K", 1440 * 1024, nil},
			{"64M", 64 << 20, []string{"-n", "CMDTEST"}},
			{"1G", 1 << 30, nil},
			{"3333333", 3333333, []string{"-r", "64"}},
			{"4g", 4 << 30, []string{"-F", "32", "-s", "8", "-S", "1024", "-n", "LBL", "-f", "1"}},
			{"200M", 200 << 20, []string{"-F", "16", "-r", "1024", "-s", "32"}},
			{"32M", 32 << 20, []string{"-F", "12", "-s", "16", "-S", "2048"}},
		} {
			t.Run(c.size+strings.Join(c.flags, ""), func(t *testing.T) {
				ours, theirs := filepath.Join(t.TempDir(), "ours.img"), filepath.Join(t.TempDir(), "theirs.img")
				args := append(append([]string{}, c.flags...), "-i", "DEADBEEF", "--size", c.size, ours)
				r := runMkfsBinary(t, bin, args...)
				if r.code != 0 {
					t.Fatalf("exit %d: %s", r.code, r.stderr)
				}
				st, err := os.Stat(ours)
				if err != nil {
					t.Fatal(err)
				}
				if st.Size() != c.bytes {
					t.Errorf("--size %s made a %d-byte image, want %d", c.size, st.Size(), c.bytes)
				}
				if err := os.Truncate(theirs, 0); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				f, err := os.Create(theirs)
				if err != nil {
					t.Fatal(err)
				}
				f.Truncate(c.bytes)
				f.Close()
				margs := append(append([]string{}, c.flags...), "-i", "DEADBEEF", theirs)
				if out, err := exec.Command("mkfs.fat", margs...).CombinedOutput(); err != nil {
					t.Fatalf("mkfs.fat %v: %v\n%s", margs, err, out)
				}
				bsOurs, rawOurs := mkfsBootSector(t, ours)
				_, rawTheirs := mkfsBootSector(t, theirs)
				if !bytes.Equal(rawOurs, rawTheirs) {
					t.Errorf("boot sector differs from mkfs.fat %v", margs)
				}
				// The summary reports the volume as it is on disk.
				g, err := bsOurs.Geometry(st.Size())
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range []string{g.Type.String(), strconv.FormatUint(uint64(g.Clusters), 10) + " clusters", "of " + strconv.Itoa(g.ClusterSize) + " bytes", strconv.FormatInt(g.TotalSectors*int64(g.SectorSize), 10) + " bytes"} {
					if !strings.Contains(r.stdout, want) {
						t.Errorf("summary %q lacks %q", r.stdout, want)
					}
				}
				if n := strings.Count(r.stdout, "\n"); n != 1 {
					t.Errorf("summary is %d lines, want 1: %q", n, r.stdout)
				}
				if out, err := exec.Command("fsck.fat", "-n", ours).CombinedOutput(); err != nil {
					t.Errorf("fsck.fat -n: %v\n%s", err, out)
				}
			})
		}
	})

	t.Run("room to grow with --max-size", func(t *testing.T) {
		if errFsck != nil {
			testenv.Missing(t, "fsck.fat: %v", errFsck)
		}
		img := filepath.Join(t.TempDir(), "grow.img")
		r := runMkfsBinary(t, bin, "--size", "64M", "--max-size", "1G", img)
		if r.code != 0 || !strings.Contains(r.stdout, "can grow in place to 1.0 GiB") {
			t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		bs, _ := mkfsBootSector(t, img)
		g, err := bs.Geometry(64 << 20)
		if err != nil || g.Type != ondisk.FAT32 || g.MaxGrowSectors()*int64(g.SectorSize) < 1<<30 {
			t.Fatalf("%s with room to %d bytes (%v), want FAT32 that grows to 1 GiB", g.Type, g.MaxGrowSectors()*int64(g.SectorSize), err)
		}
		if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil {
			t.Fatalf("fsck.fat -n: %v\n%s", err, out)
		}
		// No layout of 16 MiB grows to 1 GiB: refused, nothing made.
		small := filepath.Join(t.TempDir(), "small.img")
		r = runMkfsBinary(t, bin, "--size", "16M", "--max-size", "1G", small)
		if r.code == 0 || !strings.Contains(r.stderr, "cannot grow") && !strings.Contains(r.stderr, "can grow to") {
			t.Fatalf("16 MiB growing to 1 GiB: exit %d, stderr %q", r.code, r.stderr)
		}
		if _, err := os.Stat(small); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused format left %s: %v", small, err)
		}
	})

	t.Run("existing image without --size", func(t *testing.T) {
		img := filepath.Join(t.TempDir(), "existing.img")
		f, err := os.Create(img)
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(64 << 20)
		f.Close()
		if r := runMkfsBinary(t, bin, "-n", "EXISTING", img); r.code != 0 || !strings.Contains(r.stdout, "FAT16") {
			t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if st, _ := os.Stat(img); st.Size() != 64<<20 {
			t.Errorf("image size changed to %d", st.Size())
		}
		missing := filepath.Join(t.TempDir(), "missing.img")
		r := runMkfsBinary(t, bin, missing)
		if r.code != 1 || !strings.Contains(r.stderr, missing) {
			t.Errorf("missing PATH without --size: exit %d, stderr %q; want 1 naming the path", r.code, r.stderr)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string // in stderr
		}{
			{[]string{"--size", "1K"}, "too"},
			{[]string{"-F", "12", "--size", "1G"}, "too many clusters for FAT12"},
			{[]string{"-F", "16", "--size", "1M"}, "too few clusters for FAT16"},
			{[]string{"-F", "32", "--size", "40K"}, "too small"}, // mkfs.fat: too few blocks for viable filesystem
			{[]string{"-s", "3", "--size", "64M"}, "sectors per cluster 3"},
			{[]string{"-s", "256", "--size", "64M"}, "sectors per cluster 256"},
			{[]string{"-S", "8192", "--size", "64M"}, "sector size 8192"},
			{[]string{"-S", "1000", "--size", "64M"}, "sector size 1000"},
			{[]string{"-F", "13", "--size", "64M"}, "12, 16 or 32"},
			{[]string{"-f", "5", "--size", "64M"}, "number of FATs 5"},
			{[]string{"-r", "8", "--size", "64M"}, "root directory entries 8"},
			{[]string{"-i", "zz", "--size", "64M"}, "hexadecimal"},
			{[]string{"-i", "123456789", "--size", "64M"}, "hexadecimal"},
			{[]string{"-n", "bad*label", "--size", "64M"}, "label"},
			{[]string{"-n", "TWELVE CHARS", "--size", "64M"}, "longer than 11"},
			{[]string{"--size", "12Q"}, "size \"12Q\""},
			{[]string{"--size", "-5M"}, "size \"-5M\""},
			{[]string{"--size", "9000000000T"}, "too large"},
			{[]string{"--bogus"}, "flag provided but not defined"},
		} {
			img := filepath.Join(t.TempDir(), "err.img")
			r := runMkfsBinary(t, bin, append(c.args, img)...)
			if r.code != 1 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%v: exit %d, stderr %q; want exit 1 with %q", c.args, r.code, r.stderr, c.want)
			}
			if _, err := os.Stat(img); err == nil {
				t.Errorf("%v: refused, but left %s behind", c.args, img)
			}
		}
		for _, args := range [][]string{{}, {"a.img", "b.img"}, {"a.img", "-F", "32"}} {
			r := runMkfsBinary(t, bin, args...)
			if r.code != 1 || !strings.Contains(r.stderr, "exactly one PATH after the options") {
				t.Errorf("%v: exit %d, stderr %q; want exit 1 asking for one PATH after the options", args, r.code, r.stderr)
			}
		}
	})
}

// TestParseSize checks the size suffixes against their definition as powers of 1024.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"512": 512, "1000000": 1000000, "1K": 1024, "1k": 1024, "1440K": 1440 * 1024,
		"64M": 64 * 1024 * 1024, "2G": 2 * 1024 * 1024 * 1024, "3T": 3 * 1024 * 1024 * 1024 * 1024,
	} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "1.5M", "0", "-1", "1KB", "1P", "0x10"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}
