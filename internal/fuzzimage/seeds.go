package fuzzimage

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// Seed is a small FAT image to start fuzzing from: an image with its trailing zeros dropped, which
// NewDevice restores.
type Seed struct {
	Name  string
	Image []byte
}

// MaxSeedBytes keeps seeds small: the fuzzer copies and mutates the whole input on every run.
const MaxSeedBytes = 64 << 10

// seedLayouts are the mkfs.fat layouts of the seeds: each FAT type, with one and two FATs, and
// cluster sizes of one sector and more. The smallest sizes keep the FATs, and so the inputs,
// short.
var seedLayouts = []struct {
	name string
	size int64
	args []string
}{
	{"fat12-64k", 64 << 10, []string{"-F", "12", "-s", "1", "-r", "32"}},
	{"fat12-2k-clusters", 256 << 10, []string{"-F", "12", "-s", "4", "-r", "16", "-f", "1"}},
	{"fat16", 2200 << 10, []string{"-F", "16", "-s", "1", "-r", "32", "-f", "1"}},
	{"fat32", 33 << 20, []string{"-F", "32", "-s", "1", "-R", "8", "-f", "1"}},
	{"fat32-2fats", 34 << 20, []string{"-F", "32", "-s", "1", "-R", "8"}},
}

// fat32SeedClusters is how many clusters FAT32 seeds keep: their FATs take 16 KiB each.
const fat32SeedClusters = 4000

// seedTree is what each seed holds, copied in with mtools: short and long names, a nested
// directory, an empty file, files of one and of several clusters.
var seedTree = []struct {
	path string
	size int // -1 for a directory
}{
	{"README.TXT", 100},
	{"a long file name.text", 700},
	{"empty", 0},
	{"DIR", -1},
	{"DIR/sub dir", -1},
	{"DIR/sub dir/Deep File.bin", 1500},
	{"DIR/x.c", 30},
}

// MkfsSeeds formats small images of every FAT type with mkfs.fat and fills them with mtools. It
// skips or fails tb (testenv) when the tools are missing.
func MkfsSeeds(tb testing.TB) []Seed {
	tb.Helper()
	testenv.RequireTool(tb, "mkfs.fat", "mcopy", "mmd")
	var seeds []Seed
	for _, l := range seedLayouts {
		img := filepath.Join(tb.TempDir(), l.name+".img")
		if err := os.WriteFile(img, nil, 0o644); err != nil {
			tb.Fatal(err)
		}
		if err := os.Truncate(img, l.size); err != nil {
			tb.Fatal(err)
		}
		run(tb, "mkfs.fat", append(append([]string{}, l.args...), "-n", "SEED", "-i", "12345678", img)...)
		host := tb.TempDir()
		for _, e := range seedTree {
			p := filepath.Join(host, filepath.FromSlash(e.path))
			if e.size < 0 {
				run(tb, "mmd", "-i", img, "::/"+e.path)
				if err := os.MkdirAll(p, 0o755); err != nil {
					tb.Fatal(err)
				}
				continue
			}
			data := bytes.Repeat([]byte(e.path+"\n"), e.size/len(e.path)+1)[:e.size]
			if err := os.WriteFile(p, data, 0o644); err != nil {
				tb.Fatal(err)
			}
			run(tb, "mcopy", "-i", img, p, "::/"+e.path)
		}
		b, err := os.ReadFile(img)
		if err != nil {
			tb.Fatal(err)
		}
		if l.args[1] == "32" {
			if b, err = repackFAT32(b, fat32SeedClusters); err != nil {
				tb.Fatalf("%s: %v", l.name, err)
			}
		}
		seeds = append(seeds, Seed{Name: l.name, Image: Trim(b)})
	}
	for _, s := range seeds {
		if len(s.Image) > MaxSeedBytes {
			tb.Fatalf("seed %s is %d bytes once trimmed, more than %d", s.Name, len(s.Image), MaxSeedBytes)
		}
	}
	return seeds
}

// DosfstoolsSeeds are seeds of the classes of dosfstools' test images: the images PlantedImages
// damages as they are damaged, always, and dosfstools' own (xxd dumps in dir, or in
// $CSI_FAT_DOSFSTOOLS_TESTS) when they are there. It returns those small enough once trimmed,
// plus, for every image, its first sectors (for the boot sector and directory targets, which
// read only those).
func DosfstoolsSeeds(tb testing.TB, dir string) (images []Seed, heads []Seed) {
	tb.Helper()
	images, heads = PlantedSeeds(tb)
	if env := os.Getenv("CSI_FAT_DOSFSTOOLS_TESTS"); env != "" {
		dir = env
	}
	dumps, _ := filepath.Glob(filepath.Join(dir, "*.xxd"))
	broken, _ := filepath.Glob(filepath.Join(dir, "*.fsck"))
	dumps = append(dumps, broken...)
	if len(dumps) > 0 {
		testenv.RequireTool(tb, "xxd")
	}
	for _, dump := range dumps {
		img := filepath.Join(tb.TempDir(), "x.img")
		in, err := os.Open(dump)
		if err != nil {
			tb.Fatal(err)
		}
		out, err := os.Create(img)
		if err != nil {
			tb.Fatal(err)
		}
		cmd := exec.Command("xxd", "-r")
		cmd.Stdin, cmd.Stdout = in, out
		err = cmd.Run()
		in.Close()
		out.Close()
		if err != nil {
			tb.Fatalf("xxd -r %s: %v", dump, err)
		}
		name := filepath.Base(dump)
		head := make([]byte, 4096)
		f, err := os.Open(img)
		if err != nil {
			tb.Fatal(err)
		}
		n, _ := f.ReadAt(head, 0)
		fi, _ := f.Stat()
		f.Close()
		heads = append(heads, Seed{Name: name, Image: head[:n]})
		if fi.Size() > MaxDeviceSize {
			continue
		}
		b, err := os.ReadFile(img)
		if err != nil {
			tb.Fatal(err)
		}
		if b = Trim(b); len(b) <= MaxSeedBytes {
			images = append(images, Seed{Name: name, Image: b})
		}
	}
	return images, heads
}

// Trim drops an image's trailing zeros, keeping at least the boot sector.
func Trim(b []byte) []byte {
	end := len(b)
	for end > 512 && b[end-1] == 0 {
		end--
	}
	return b[:end]
}

func run(tb testing.TB, name string, args ...string) {
	tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// String describes a seed for test names.
func (s Seed) String() string { return fmt.Sprintf("%s (%d bytes)", s.Name, len(s.Image)) }
