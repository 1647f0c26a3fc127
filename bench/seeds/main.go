// Command seeds runs the engine's seed benchmarks: each workload twice or more in one run, the
// kernel's stock behaviour ("before", expressed through fatvol's knobs) next to fatvol's
// ("after"), on image files behind a counting device. It prints device requests, bytes and
// flushes, which do not depend on the machine, a modelled time for three devices, and wall time.
// Every volume it writes must pass fsck.fat -n.
//
//	go run ./bench/seeds            # full sizes
//	go run ./bench/seeds -quick     # small sizes, a minute or less
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/internal/judge"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

func main() {
	quick := flag.Bool("quick", false, "small sizes (for a smoke run)")
	only := flag.String("only", "", "run only workloads whose name contains this")
	dir := flag.String("dir", "", "directory for the image files (default: a new temporary directory)")
	flag.Parse()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))

	work := *dir
	if work == "" {
		d, err := os.MkdirTemp("", "csi-fat-bench-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(d)
		work = d
	}
	b := &bench{dir: work, quick: *quick}
	for _, w := range workloads {
		if *only != "" && !strings.Contains(w.name, *only) {
			continue
		}
		fmt.Printf("\n## %s\n%s\n\n", w.name, w.about)
		rows, err := w.run(b)
		if err != nil {
			fail(fmt.Errorf("%s: %w", w.name, err))
		}
		printRows(rows)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// deviceModel prices a device's requests: a cost per request, bytes over bandwidth, and a cost
// per flush (a cache flush command).
type deviceModel struct {
	name      string
	perReq    time.Duration
	bandwidth float64 // bytes per second
	perFlush  time.Duration
}

// The three devices, fitted to the figures in ../shared/seeds/fat-flush-close-writeback.txt:
//   - USB stick: the PNY 32G stick copying 3 GiB: 13,996 requests in 537 s (stock) against
//     3,575 in 180 s (flush) give 34 ms a request and 55 MB/s;
//   - SATA HDD: the WD Blue copying 4 GiB: 8,913 requests in 49 s against 2,168 in 44 s give
//     0.75 ms a request and 100 MB/s;
//   - SATA SSD: the 870 EVO at 377-378 MB/s whatever the request count: 0.05 ms and 380 MB/s.
//
// The seeds give no flush costs; these are typical: 20 ms, 10 ms (a rotation or so), 1 ms.
var models = []deviceModel{
	{"USB stick", 34 * time.Millisecond, 55e6, 20 * time.Millisecond},
	{"SATA HDD", 750 * time.Microsecond, 100e6, 10 * time.Millisecond},
	{"SATA SSD", 50 * time.Microsecond, 380e6, time.Millisecond},
}

func (m deviceModel) cost(s blockdev.Stats) time.Duration {
	reqs := time.Duration(s.Reads+s.Writes) * m.perReq
	xfer := time.Duration(float64(s.BytesRead+s.BytesWritten) / m.bandwidth * float64(time.Second))
	return reqs + xfer + time.Duration(s.Flushes)*m.perFlush
}

// row is one measured variant of a workload.
type row struct {
	variant string
	stats   blockdev.Stats
	wall    time.Duration
	notes   []string
	unmount blockdev.Stats // seed 003: what was left for unmount
}

type workload struct {
	name  string
	about string
	run   func(b *bench) ([]row, error)
}

type bench struct {
	dir   string
	quick bool
	n     int
}

// image makes a fresh image file of size bytes formatted with opts.
func (b *bench) image(size int64, opts mkfs.Options) (string, error) {
	b.n++
	path := filepath.Join(b.dir, fmt.Sprintf("v%03d.img", b.n))
	dev, err := blockdev.CreateImage(path, size)
	if err != nil {
		return "", err
	}
	defer dev.Close()
	opts.VolumeID, opts.VolumeIDSet = 0x20261203, true
	if _, err := mkfs.Format(dev, opts); err != nil {
		return "", fmt.Errorf("mkfs %s: %w", path, err)
	}
	return path, nil
}

// open opens an image behind a counting device.
func open(path string, opts fatvol.Options, wrap func(blockdev.Device) blockdev.Device) (*fatvol.Volume, *blockdev.Counting, error) {
	f, err := blockdev.Open(path, false)
	if err != nil {
		return nil, nil, err
	}
	var dev blockdev.Device = f
	if wrap != nil {
		dev = wrap(dev)
	}
	c := blockdev.NewCounting(dev)
	v, err := fatvol.Open(c, opts)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return v, c, nil
}

// fsckClean fails unless fsck.fat -n and the project's checker both find the image clean, then
// removes it.
func fsckClean(path string) error {
	if err := judge.Check(path); err != nil {
		return err
	}
	return os.Remove(path)
}

func (b *bench) pick(full, quick int64) int64 {
	if b.quick {
		return quick
	}
	return full
}

var workloads = []workload{
	{"seed 000: sync FAT32 fallocate, batched mirror writes",
		"16 files, fallocate(KEEP_SIZE) each, on a sync-mounted FAT32 with 2 FATs. before: every FAT sector\n" +
			"of every copy its own synchronous write; after: coalesced runs for all copies, then one flush.",
		seedFallocate},
	{"seed 003: copy then sync, close-time writeback",
		"One large file, then many 1 MiB files, written in 128 KiB writes, then unmount. before: flush off\n" +
			"(data waits for the background writer or unmount); after: flush on close, waiting and not.",
		seedCopy},
	{"seed 002: block size from the device size",
		"Sequential 1 MiB writes, then unmount, on devices whose size is and is not a multiple of 4 KiB.\n" +
			"before: I/O block size = logical block size; after: the largest power of two up to the page\n" +
			"size that divides the device size.",
		seedBlockSize},
	{"seed 004: appends do not rewrite the directory entry",
		"2 KiB appends to one file between open and close. before: the entry is written after every\n" +
			"append; after: size and times reach the disk at writeback, close-time flush or unmount.",
		seedAppend},
	{"many files in one directory",
		"Files created in one directory, 1,000 and 10,000: the name index keeps the cost per create flat.",
		manyFiles},
}

func seedFallocate(b *bench) ([]row, error) {
	var rows []row
	files := 16
	for _, cluster := range []int{512, 4096} {
		for _, fileSize := range []int64{b.pick(256*MiB, 16*MiB), MiB} {
			for _, perSector := range []bool{true, false} {
				size := int64(files)*fileSize + fileSize + 256*MiB
				path, err := b.image(size, mkfs.Options{FATType: ondisk.FAT32, SectorsPerCluster: cluster / 512})
				if err != nil {
					return nil, err
				}
				v, c, err := open(path, fatvol.Options{Sync: true, MirrorPerSector: perSector}, nil)
				if err != nil {
					return nil, err
				}
				var handles []*fatvol.File
				for i := range files {
					f, err := v.Create(fmt.Sprintf("file%02d", i))
					if err != nil {
						return nil, err
					}
					handles = append(handles, f)
				}
				before := c.Stats()
				start := time.Now()
				for _, f := range handles {
					if err := f.Fallocate(0, fileSize, true); err != nil {
						return nil, err
					}
				}
				wall := time.Since(start)
				s := c.Stats().Sub(before)
				for _, f := range handles {
					f.Close()
				}
				if err := v.Close(); err != nil {
					return nil, err
				}
				if err := fsckClean(path); err != nil {
					return nil, err
				}
				variant := "after  (batched)"
				if perSector {
					variant = "before (per sector)"
				}
				rows = append(rows, row{
					variant: fmt.Sprintf("%s %4d B clusters, %s files", variant, cluster, human(fileSize)),
					stats:   s, wall: wall,
					notes: []string{fmt.Sprintf("synchronous requests (writes+flushes): %d", s.Writes+s.Flushes)},
				})
			}
			n := len(rows)
			bf, af := rows[n-2].stats, rows[n-1].stats
			rows[n-1].notes = append(rows[n-1].notes, fmt.Sprintf("%.1fx fewer synchronous requests than per-sector mirroring (goal: 20x)",
				float64(bf.Writes+bf.Flushes)/float64(max(1, af.Writes+af.Flushes))))
		}
	}
	return rows, nil
}

// copyFiles writes count files of size bytes in 128 KiB writes, closing each, and returns the
// stats of the copy (up to the last close returning) and of the unmount that follows.
func copyFiles(b *bench, opts fatvol.Options, count int, size int64) (cp, umount blockdev.Stats, wall time.Duration, err error) {
	path, err := b.image(int64(count)*size+size/4+512*MiB, mkfs.Options{})
	if err != nil {
		return
	}
	v, c, err := open(path, opts, nil)
	if err != nil {
		return
	}
	buf := make([]byte, 128*KiB)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	for i := range count {
		f, err2 := v.Create(fmt.Sprintf("copy-%04d.bin", i))
		if err2 != nil {
			return cp, umount, 0, err2
		}
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err2 := f.Write(buf[:min(int64(len(buf)), size-off)]); err2 != nil {
				return cp, umount, 0, err2
			}
		}
		if err2 := f.Close(); err2 != nil {
			return cp, umount, 0, err2
		}
	}
	cp = c.Stats()
	if err = v.Close(); err != nil {
		return
	}
	wall = time.Since(start)
	umount = c.Stats().Sub(cp)
	err = fsckClean(path)
	return
}

func seedCopy(b *bench) ([]row, error) {
	var rows []row
	variants := []struct {
		name string
		opts fatvol.Options
	}{
		{"before (flush off)", fatvol.Options{}},
		{"after  (flush, wait)", fatvol.Options{Flush: true}},
		{"after  (flush, no wait)", fatvol.Options{Flush: true, FlushNoWait: true}},
	}
	shapes := []struct {
		count int
		size  int64
	}{{1, b.pick(GiB, 128*MiB)}, {int(b.pick(1000, 100)), MiB}}
	for _, sh := range shapes {
		for _, va := range variants {
			cp, um, wall, err := copyFiles(b, va.opts, sh.count, sh.size)
			if err != nil {
				return nil, err
			}
			total := cp
			total.Reads += um.Reads
			total.Writes += um.Writes
			total.BytesRead += um.BytesRead
			total.BytesWritten += um.BytesWritten
			total.Flushes += um.Flushes
			notes := []string{fmt.Sprintf("left for unmount: %s in %d requests; unmount modelled: %s",
				human(um.BytesWritten), um.Writes, modelled(um))}
			rows = append(rows, row{
				variant: fmt.Sprintf("%s %d x %s", va.name, sh.count, human(sh.size)),
				stats:   total, wall: wall, notes: notes, unmount: um,
			})
		}
	}
	return rows, nil
}

func seedBlockSize(b *bench) ([]row, error) {
	var rows []row
	total := b.pick(512*MiB, 64*MiB)
	for _, devSize := range []int64{GiB, GiB + 512} {
		for _, before := range []bool{true, false} {
			path, err := b.image(devSize, mkfs.Options{})
			if err != nil {
				return nil, err
			}
			opts := fatvol.Options{}
			if before {
				opts.BlockSize = 512
			}
			v, c, err := open(path, opts, nil)
			if err != nil {
				return nil, err
			}
			bs := v.BlockSize()
			buf := make([]byte, MiB)
			start := time.Now()
			f, err := v.Create("seq.bin")
			if err != nil {
				return nil, err
			}
			for off := int64(0); off < total; off += MiB {
				if _, err := f.Write(buf); err != nil {
					return nil, err
				}
			}
			f.Close()
			if err := v.Close(); err != nil {
				return nil, err
			}
			wall := time.Since(start)
			if err := fsckClean(path); err != nil {
				return nil, err
			}
			name := "after "
			if before {
				name = "before"
			}
			rows = append(rows, row{
				variant: fmt.Sprintf("%s device of %d bytes, block size %d", name, devSize, bs),
				stats:   c.Stats(), wall: wall,
			})
		}
	}
	return rows, nil
}

// entryWatch counts the writes that cover a directory entry's bytes.
type entryWatch struct {
	blockdev.Device
	lo, hi int64
	hits   int
}

func (w *entryWatch) note(off, n int64) {
	if w.hi > w.lo && off < w.hi && off+n > w.lo {
		w.hits++
	}
}

func (w *entryWatch) WriteAt(p []byte, off int64) (int, error) {
	w.note(off, int64(len(p)))
	return w.Device.WriteAt(p, off)
}

func (w *entryWatch) WritevAt(bufs [][]byte, off int64) (int, error) {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	w.note(off, n)
	return w.Device.WritevAt(bufs, off)
}

func seedAppend(b *bench) ([]row, error) {
	var rows []row
	appends := int(b.pick(100_000, 10_000))
	for _, before := range []bool{true, false} {
		path, err := b.image(int64(appends)*2*KiB+256*MiB, mkfs.Options{})
		if err != nil {
			return nil, err
		}
		watch := &entryWatch{}
		v, c, err := open(path, fatvol.Options{EntryPerWrite: before}, func(d blockdev.Device) blockdev.Device {
			watch.Device = d
			return watch
		})
		if err != nil {
			return nil, err
		}
		f, err := v.Create("app.log")
		if err != nil {
			return nil, err
		}
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		pos := fi.Sys().(*fatvol.Attr).Pos
		f.Close()
		if err := v.Sync(); err != nil {
			return nil, err
		}
		watch.lo, watch.hi = pos, pos+ondisk.DirEntrySize
		startStats := c.Stats()
		start := time.Now()
		f, err = v.OpenFile("app.log", os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return nil, err
		}
		line := make([]byte, 2*KiB)
		for i := range appends {
			line[0] = byte(i)
			if _, err := f.Write(line); err != nil {
				return nil, err
			}
		}
		hits := watch.hits
		f.Close()
		if err := v.Close(); err != nil {
			return nil, err
		}
		wall := time.Since(start)
		if err := fsckClean(path); err != nil {
			return nil, err
		}
		name := "after  (entry at writeback)"
		if before {
			name = "before (entry per append)"
		}
		rows = append(rows, row{
			variant: fmt.Sprintf("%s %d x 2 KiB", name, appends),
			stats:   c.Stats().Sub(startStats), wall: wall,
			notes: []string{fmt.Sprintf("directory-entry writes between open and close: %d (goal after: 0)", hits)},
		})
	}
	return rows, nil
}

func manyFiles(b *bench) ([]row, error) {
	var rows []row
	var walls []time.Duration
	// The best of three runs of each size, so that a pause of the machine does not pass for
	// the engine's cost.
	for _, n := range []int{1000, 10000} {
		best := time.Duration(0)
		var bestStats blockdev.Stats
		for range 3 {
			path, err := b.image(256*MiB, mkfs.Options{FATType: ondisk.FAT32})
			if err != nil {
				return nil, err
			}
			v, c, err := open(path, fatvol.Options{}, nil)
			if err != nil {
				return nil, err
			}
			if err := v.Mkdir("d"); err != nil {
				return nil, err
			}
			start := time.Now()
			for i := range n {
				f, err := v.OpenFile(fmt.Sprintf("d/file-%05d.dat", i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err != nil {
					return nil, err
				}
				f.Close()
			}
			wall := time.Since(start)
			if err := v.Close(); err != nil {
				return nil, err
			}
			if err := fsckClean(path); err != nil {
				return nil, err
			}
			if best == 0 || wall < best {
				best, bestStats = wall, c.Stats()
			}
		}
		walls = append(walls, best)
		rows = append(rows, row{variant: fmt.Sprintf("%5d files", n), stats: bestStats, wall: best})
	}
	rows[1].notes = []string{fmt.Sprintf("time(10k)/time(1k) = %.1f (linear: 10); %.1f µs a create at 1k, %.1f µs at 10k",
		float64(walls[1])/float64(walls[0]), float64(walls[0].Nanoseconds())/1e3/1000, float64(walls[1].Nanoseconds())/1e3/10000)}
	return rows, nil
}

func human(n int64) string {
	switch {
	case n >= GiB && n%GiB == 0:
		return fmt.Sprintf("%d GiB", n/GiB)
	case n >= MiB && n%MiB == 0:
		return fmt.Sprintf("%d MiB", n/MiB)
	case n >= MiB:
		return fmt.Sprintf("%.1f MiB", float64(n)/MiB)
	case n >= KiB:
		return fmt.Sprintf("%.1f KiB", float64(n)/KiB)
	}
	return fmt.Sprintf("%d B", n)
}

func modelled(s blockdev.Stats) string {
	var parts []string
	for _, m := range models {
		parts = append(parts, fmt.Sprintf("%s %s", m.name, round(m.cost(s))))
	}
	return strings.Join(parts, ", ")
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(100 * time.Microsecond)
}

func printRows(rows []row) {
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "variant\twrites\twritten\tavg write\treads\tflushes\t")
	for _, m := range models {
		fmt.Fprintf(tw, "%s\t", m.name)
	}
	fmt.Fprint(tw, "wall\t\n")
	for _, r := range rows {
		s := r.stats
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t", r.variant, s.Writes, human(s.BytesWritten),
			human(int64(s.AvgWriteSize())), s.Reads, s.Flushes)
		for _, m := range models {
			fmt.Fprintf(tw, "%s\t", round(m.cost(s)))
		}
		fmt.Fprintf(tw, "%s\t\n", round(r.wall))
	}
	tw.Flush()
	for _, r := range rows {
		for _, n := range r.notes {
			fmt.Printf("  %s: %s\n", strings.TrimSpace(r.variant), n)
		}
	}
}
