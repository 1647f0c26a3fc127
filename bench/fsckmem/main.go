// Command fsckmem measures the check's memory and time against fsck.fat's on one volume of many
// small files: it writes a FAT32 image holding them (through the engine, in directories of
// -per-dir files), then runs `csi-fat fsck -n` and `fsck.fat -n` on it, each twice, and prints
// each one's peak resident memory, wall time and CPU time (GNU time, package time), and the
// ratios.
//
//	go run ./bench/fsckmem -csi-fat BIN -files 300000 [-size 2G] [-image PATH]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/csi-fat/csi-fat/bench/internal/gnutime"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
)

func main() {
	bin := flag.String("csi-fat", "", "the csi-fat binary to measure")
	files := flag.Int("files", 100000, "files on the volume")
	perDir := flag.Int("per-dir", 1000, "files per directory")
	bytes := flag.Int("bytes", 200, "bytes in each file")
	size := flag.Int64("size", 2<<30, "image size in bytes")
	image := flag.String("image", "", "where the image goes (default: a temporary file, removed after)")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "usage: fsckmem -csi-fat BIN [-files N] [-per-dir N] [-bytes N] [-size BYTES] [-image PATH]")
		os.Exit(2)
	}
	if err := run(*bin, *image, *size, *files, *perDir, *bytes); err != nil {
		fmt.Fprintln(os.Stderr, "fsckmem:", err)
		os.Exit(1)
	}
}

func run(bin, image string, size int64, files, perDir, bytes int) error {
	if image == "" {
		dir, err := os.MkdirTemp("", "fsckmem")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		image = filepath.Join(dir, "vol.img")
	}
	if err := build(image, size, files, perDir, bytes); err != nil {
		return err
	}
	type result struct {
		name      string
		rss       int64 // KiB
		wall, cpu time.Duration
	}
	var results []result
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"csi-fat fsck -n", []string{bin, "fsck", "-n", image}},
		{"fsck.fat -n", []string{"fsck.fat", "-n", image}},
	} {
		best := result{name: c.name}
		for round := 0; round < 2; round++ {
			rss, wall, cpu, err := gnutime.Measure(c.argv)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if round == 0 || wall < best.wall {
				best.wall, best.cpu = wall, cpu
			}
			best.rss = max(best.rss, rss)
		}
		results = append(results, best)
	}
	fmt.Printf("| checker (%d files) | peak RSS | wall | CPU |\n|---|---|---|---|\n", files)
	for _, r := range results {
		fmt.Printf("| %s | %.1f MiB | %.2f s | %.2f s |\n", r.name, float64(r.rss)/1024, r.wall.Seconds(), r.cpu.Seconds())
	}
	ours, theirs := results[0], results[1]
	fmt.Printf("memory: %.1f MiB over fsck.fat's (goal: at most 32); time: %.2fx faster than fsck.fat (goal: at least 2x)\n",
		float64(ours.rss-theirs.rss)/1024, theirs.wall.Seconds()/ours.wall.Seconds())
	return nil
}

// build writes a FAT32 image of size bytes holding files files of bytes bytes each, perDir to a
// directory, as a camera card holds photos.
func build(path string, size int64, files, perDir, bytes int) error {
	start := time.Now()
	os.Remove(path)
	dev, err := blockdev.CreateImage(path, size)
	if err != nil {
		return err
	}
	if _, err := mkfs.Format(dev, mkfs.Options{FATType: 32}); err != nil {
		dev.Close()
		return err
	}
	vol, err := fatvol.Open(dev, fatvol.Options{})
	if err != nil {
		dev.Close()
		return err
	}
	data := make([]byte, bytes)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	for i := 0; i < files; i++ {
		dir := fmt.Sprintf("DCIM-%04d", i/perDir)
		if i%perDir == 0 {
			if err := vol.Mkdir(dir); err != nil {
				return err
			}
		}
		f, err := vol.Create(fmt.Sprintf("%s/photo-%07d.jpg", dir, i))
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if err := vol.Close(); err != nil { // closes dev too
		return err
	}
	fmt.Fprintf(os.Stderr, "fsckmem: %s: %d files in %d directories, written in %v\n", path, files, (files+perDir-1)/perDir, time.Since(start).Round(time.Millisecond))
	return nil
}
