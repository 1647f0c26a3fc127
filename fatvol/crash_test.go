package fatvol_test

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/internal/judge"
)

// Crash consistency. Each workload runs on a fresh volume behind a recording device; then the
// medium is rebuilt at power cuts (crashimage_test.go): at every request of the log, several
// choices each of which writes since the last flush reached the medium and how much of the
// request under way did; the large workload samples cuts at random instead. At every cut:
//
//   - the engine opens the volume and reads every file and directory without an error;
//   - our fsck finds nothing but what a cut may leave: the dirty bit, lost clusters (counted;
//     the goal is none), a stale FSINFO free count, FAT copies that differ while each is
//     consistent on its own (the check is repeated with every other copy in place of the
//     first). A cross-link, a broken or short chain, a bad entry fails;
//   - every path pinned by the model (crashmodel_test.go) holds exactly what was durable: a file
//     fsync'ed with its fsync'ed content, every operation completed in sync mode, everything
//     after a syncfs or the unmount.
//
// fsck.fat -n is slow next to that (a process and a file per cut), so it judges every
// crashFsckEvery-th cut and every cut that failed, with the same tolerance.
//
// Knobs (environment): FATVOL_CRASH_SEED replays a run (the seed is printed); FATVOL_CRASH_CHOICES
// (default 4) is the number of choices of surviving writes per request; FATVOL_CRASH_SAMPLES
// (default 1500) the number of cuts sampled in the large workload; FATVOL_CRASH_FSCK_EVERY (default
// 50). The long run: FATVOL_CRASH_CHOICES=16 FATVOL_CRASH_SAMPLES=10000.

func crashEnvInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return v
}

func crashSeed(t *testing.T) uint64 {
	if s := os.Getenv("FATVOL_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("FATVOL_CRASH_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// Small clusters (512 bytes) make short workloads cross clusters, FAT sectors and directory
// sectors often.
var crashVolumes = []volumeSpec{
	{"FAT12", 1 << 20, []string{"-F", "12", "-s", "1"}},
	{"FAT16", 8 << 20, []string{"-F", "16", "-s", "1"}},
	{"FAT32", 34 << 20, []string{"-F", "32", "-s", "1"}},
}

var crashModes = []struct {
	name string
	opts fatvol.Options
}{
	{"default", fatvol.Options{}},
	{"flush", fatvol.Options{Flush: true}},
	{"sync", fatvol.Options{Sync: true}},
}

type crashWorkload struct {
	name  string
	setup func(r *crashRun) // before recording starts
	run   func(r *crashRun)
	large bool // sample cuts instead of trying every request
}

// longName makes names that need long-name entries, so entries span several slots.
func longName(i int) string { return fmt.Sprintf("A file with a long name number %02d.data", i) }

// nineSlots makes names of nine long-name entries and a short one: 320 bytes, so most of them
// cross a sector.
func nineSlots(i int) string {
	return fmt.Sprintf("%s number %02d.data", strings.Repeat("long name ", 10), i)
}

var crashWorkloads = []crashWorkload{
	{name: "create", run: func(r *crashRun) {
		r.create("a.txt", r.data(100))
		r.create(longName(1), r.data(1500))
		r.fsync(longName(1))
		r.create("empty", nil)
		r.create("B.BIN", r.data(5000))
		r.fsync("B.BIN")
		r.create(longName(2), r.data(512))
		r.unmount()
	}},
	{name: "write", setup: func(r *crashRun) {
		r.create("f1", r.data(4096))
		r.create(longName(1), r.data(10000))
	}, run: func(r *crashRun) {
		r.writeAt("f1", 1000, r.data(1200))
		r.fsync("f1")
		r.writeAt(longName(1), 3000, r.data(3000))
		r.writeAt("f1", 3900, r.data(2000)) // past the end: grows
		r.syncfs()
		r.writeAt(longName(1), 9000, r.data(4000))
		r.unmount()
	}},
	{name: "append", setup: func(r *crashRun) {
		r.create("log", r.data(700))
	}, run: func(r *crashRun) {
		for i := range 10 {
			r.appendTo("log", r.data(100+r.rnd.IntN(1400)))
			if i%3 == 2 {
				r.fsync("log")
			}
		}
		r.unmount()
	}},
	{name: "rename", setup: func(r *crashRun) {
		// Enough long names that the source and the target live in different sectors.
		for i := range 12 {
			r.create(longName(i), r.data(300))
		}
		r.create("target.txt", r.data(3000))
		r.mkdir("sub")
		r.create("sub/x", r.data(2000))
		r.mkdir("sub/inner")
		r.create("sub/inner/f", r.data(700))
	}, run: func(r *crashRun) {
		r.create("new.tmp", r.data(2500))
		r.fsync("new.tmp")
		r.rename("new.tmp", "target.txt")
		r.syncfs()
		r.rename(longName(0), longName(11)) // over a target in another sector
		r.rename("sub/x", "moved")          // to another directory
		r.fsync("moved")
		r.rename("sub/inner", "inner") // a directory to another parent
		r.rename("sub", "sub2")
		r.rename(longName(3), "short")
		r.exchange(longName(5), "target.txt")
		r.fsync("target.txt")
		r.unmount()
	}},
	{name: "rename-sector", setup: func(r *crashRun) {
		r.create("a", r.data(900))
		r.create("b", r.data(1500))
		r.create("c", r.data(200))
	}, run: func(r *crashRun) {
		r.rename("a", "d") // both entries in the root's first sector
		r.rename("d", "A2.TXT")
		r.fsync("A2.TXT")
		r.rename("b", "Bee") // a long name, still in that sector
		r.rename("c", "b")
		r.unmount()
	}},
	{name: "rename-over", setup: func(r *crashRun) {
		for i := range 12 {
			r.create(longName(i), r.data(200+100*i))
		}
		r.mkdir("d")
		r.create("d/t", r.data(1200))
		r.mkdir("d/empty")
		r.mkdir("full")
		r.create("full/f", r.data(600))
	}, run: func(r *crashRun) {
		r.rename(longName(1), longName(10)) // over a target in another sector
		r.rename(longName(2), "d/t")        // over a target in another directory
		r.fsync("d/t")
		r.rename("full", "d/empty") // a directory over an empty one, to another parent
		r.rename("d/t", longName(3))
		r.unmount()
	}},
	{name: "rename-loop", setup: func(r *crashRun) {
		for i := range 10 {
			r.create(longName(i), r.data(100))
		}
		r.create("A", r.data(2000))
	}, run: func(r *crashRun) {
		// No two names of nine long-name entries share a sector, so the moves cross sectors.
		names := []string{"A", nineSlots(20), "C", nineSlots(21)}
		for i := range 12 {
			r.rename(names[i%4], names[(i+1)%4])
			if i%3 == 2 {
				r.fsync(names[(i+1)%4])
			}
		}
		r.unmount()
	}},
	{name: "crossing", setup: func(r *crashRun) {
		r.mkdir("d")
		for i := range 6 {
			r.create("d/"+nineSlots(i), r.data(300))
		}
	}, run: func(r *crashRun) {
		r.remove("d/" + nineSlots(1)) // a name crossing sectors, removed
		r.create("d/"+nineSlots(10), r.data(500))
		r.fsync("d/" + nineSlots(10))
		r.create("d/"+longName(1), r.data(100))
		r.remove("d/" + nineSlots(3))
		r.syncfs()
		r.rename("d/"+nineSlots(4), nineSlots(11)) // crossing on both sides
		r.create("d/"+nineSlots(12), nil)
		r.create(nineSlots(13), r.data(700))
		r.unmount()
	}},
	{name: "maildir", setup: func(r *crashRun) {
		r.mkdir("new")
		r.mkdir("cur")
		r.mkdir("tmp")
	}, run: func(r *crashRun) {
		for i := range 5 {
			msg := fmt.Sprintf("%d.M%dP%d.host", 1700000000+i, i*37, 4242)
			r.create("tmp/"+msg, r.data(300+r.rnd.IntN(2000)))
			r.fsync("tmp/" + msg)
			r.rename("tmp/"+msg, "new/"+msg)
			if i%2 == 1 {
				r.syncfs()
			}
			r.rename("new/"+msg, "cur/"+msg+",2S")
		}
		r.unmount()
	}},
	{name: "truncate", setup: func(r *crashRun) {
		r.create("big", r.data(20000))
		r.create(longName(1), r.data(3000))
		r.create("small", r.data(700))
	}, run: func(r *crashRun) {
		r.truncate("big", 5000) // shrink to a non-zero size
		r.fsync("big")
		r.truncate(longName(1), 0)
		r.truncate("small", 9000) // grow, zero-filled
		r.syncfs()
		r.truncate("big", 100)
		r.create("after", r.data(6000)) // may reuse what the shrinks freed
		r.fsync("after")
		r.unmount()
	}},
	{name: "unlink", setup: func(r *crashRun) {
		r.create("f1", r.data(6000))
		r.create(longName(1), r.data(2000))
		r.mkdir("d")
		r.create("d/inner", r.data(1000))
		r.create("open1", r.data(3000))
		r.create("open2", r.data(2000))
	}, run: func(r *crashRun) {
		h1, h2 := r.holdOpen("open1"), r.holdOpen("open2")
		r.remove("open1") // removed while open: freed at the last close
		r.remove("open2") // freed at the unmount
		r.remove("f1")
		r.create("f2", r.data(7000)) // may reuse f1's clusters
		r.fsync("f2")
		r.remove(longName(1))
		r.remove("d/inner")
		r.create("d/again", r.data(1500))
		r.syncfs()
		r.check("close open1", h1.Close())
		r.remove("f2")
		r.syncfs()
		_ = h2 // still open at the unmount
		r.unmount()
	}},
	{name: "mkdir", run: func(r *crashRun) {
		r.mkdir("d1")
		r.create("d1/a", r.data(600))
		r.mkdir("d1/d2")
		for i := range 6 { // grows d1 past its first cluster
			r.create("d1/"+longName(i), r.data(100))
		}
		r.fsync("d1/" + longName(5))
		r.syncfs()
		r.remove("d1/a")
		r.mkdir(longName(7))
		r.remove("d1/d2") // rmdir
		r.syncfs()
		for i := range 6 {
			r.remove("d1/" + longName(i))
		}
		r.remove("d1")
		r.unmount()
	}},
	{name: "fallocate", setup: func(r *crashRun) {
		r.create("p", r.data(1000))
	}, run: func(r *crashRun) {
		r.fallocate("p", 0, 8192, true)
		r.fsync("p")
		r.create("q", nil)
		r.fallocate("q", 0, 3000, false)
		r.writeAt("p", 1000, r.data(2000)) // into the preallocated clusters
		r.syncfs()
		r.fallocate("q", 2000, 6000, true)
		r.fsync("q")
		r.unmount()
	}},
	{name: "mixed", large: true, run: mixedWorkload},
}

// mixedWorkload is a long random mix of every operation over a few names.
func mixedWorkload(r *crashRun) {
	files := []string{"m1", "m2", longName(1), longName(2), "d/m3", "d/" + longName(3)}
	r.mkdir("d")
	for step := range 120 {
		p := files[r.rnd.IntN(len(files))]
		e := r.model[p]
		switch op := r.rnd.IntN(10); {
		case e == nil:
			r.create(p, r.data(r.rnd.IntN(4000)))
		case op < 3:
			r.appendTo(p, r.data(1+r.rnd.IntN(2000)))
		case op < 5:
			r.writeAt(p, int64(r.rnd.IntN(len(e.data)+1)), r.data(1+r.rnd.IntN(1500)))
		case op == 5:
			r.truncate(p, int64(r.rnd.IntN(len(e.data)+2000)))
		case op == 6:
			r.remove(p)
		case op == 7:
			q := files[r.rnd.IntN(len(files))]
			if q != p {
				r.rename(p, q)
			}
		case op == 8:
			r.fallocate(p, int64(r.rnd.IntN(len(e.data)+1)), int64(1+r.rnd.IntN(3000)), r.rnd.IntN(2) == 0)
		default:
			r.fsync(p)
		}
		if step%40 == 39 {
			r.syncfs()
		}
	}
	r.unmount()
}

// crashTally counts what the cuts of one recording left.
type crashTally struct {
	requests, flushes int
	cuts, fsckFat     int
	lostCuts          int    // cuts that left lost clusters
	lost              uint64 // lost clusters, summed over cuts
	beyondSize        int    // cuts that left a chain longer than its file's size
	staleFree         int    // cuts with a stale FSINFO free count
	fatsDiffer        int    // cuts whose FAT copies differ
	renames           int    // cuts that left a file under two names (a rename to complete)
	orphans           int    // cuts that left orphaned long-name entries (a name crossing sectors)
	failed            int
}

func (a *crashTally) add(b crashTally) {
	a.requests += b.requests
	a.flushes += b.flushes
	a.cuts += b.cuts
	a.fsckFat += b.fsckFat
	a.lostCuts += b.lostCuts
	a.lost += b.lost
	a.beyondSize += b.beyondSize
	a.staleFree += b.staleFree
	a.fatsDiffer += b.fatsDiffer
	a.renames += b.renames
	a.orphans += b.orphans
	a.failed += b.failed
}

func (a crashTally) String() string {
	return fmt.Sprintf("%d cuts over %d requests (%d flushes), %d also by fsck.fat -n; %d failed; lost clusters at %d cuts (%d clusters); a chain past its size at %d; stale FSINFO free count at %d; FAT copies differing at %d; a rename to complete at %d; orphaned long names at %d",
		a.cuts, a.requests, a.flushes, a.fsckFat, a.failed, a.lostCuts, a.lost, a.beyondSize, a.staleFree, a.fatsDiffer, a.renames, a.orphans)
}

func TestCrashConsistency(t *testing.T) {
	requireTools(t, "mkfs.fat", "fsck.fat")
	seed := crashSeed(t)
	defChoices, defSamples := 4, 1500
	if raceEnabled {
		defChoices, defSamples = 1, 150
	}
	choices := crashEnvInt(t, "FATVOL_CRASH_CHOICES", defChoices)
	samples := crashEnvInt(t, "FATVOL_CRASH_SAMPLES", defSamples)
	fsckEvery := crashEnvInt(t, "FATVOL_CRASH_FSCK_EVERY", 50)
	t.Logf("seed %d (replay with FATVOL_CRASH_SEED=%d), %d choices a request, %d sampled cuts in large workloads, fsck.fat -n on every %dth cut and every failure",
		seed, seed, choices, samples, fsckEvery)
	start := time.Now()
	var (
		mu    sync.Mutex
		total crashTally
		rows  []string
	)
	for _, spec := range crashVolumes {
		t.Run(spec.name, func(t *testing.T) {
			for _, mode := range crashModes {
				t.Run(mode.name, func(t *testing.T) {
					for wi, w := range crashWorkloads {
						t.Run(w.name, func(t *testing.T) {
							rnd := rand.New(rand.NewPCG(seed, uint64(wi)))
							tally := runCrashWorkload(t, spec, mode.opts, w, rnd, choices, samples, fsckEvery)
							t.Logf("%s/%s/%s: %s", spec.name, mode.name, w.name, tally)
							mu.Lock()
							total.add(tally)
							rows = append(rows, fmt.Sprintf("%-6s %-8s %-10s %6d cuts %5d requests %4d flushes %5d lost-cluster cuts", spec.name, mode.name, w.name, tally.cuts, tally.requests, tally.flushes, tally.lostCuts))
							mu.Unlock()
						})
					}
				})
			}
		})
	}
	t.Logf("per workload:\n%s", strings.Join(rows, "\n"))
	t.Logf("crash consistency summary (seed %d, %s): %s", seed, time.Since(start).Round(time.Millisecond), total)
}

func runCrashWorkload(t *testing.T, spec volumeSpec, opts fatvol.Options, w crashWorkload, rnd *rand.Rand, choices, samples, fsckEvery int) crashTally {
	r, log := recordCrashWorkload(t, spec, opts, w, rnd)

	var points []crashPoint
	if w.large {
		points = sampleCrashPoints(log, rnd, samples)
	} else {
		points = everyCrashPoint(log, rnd, choices)
	}
	tally := crashTally{requests: len(log.ops)}
	for _, op := range log.ops {
		if op.Flush {
			tally.flushes++
		}
	}
	dir := t.TempDir()
	reported := 0
	for i, p := range points {
		dev := log.at(p)
		renamesBefore, orphansBefore := tally.renames, tally.orphans
		lost, fails := checkCrashPoint(r, p, dev, &tally)
		renameCut, orphanCut := tally.renames > renamesBefore, tally.orphans > orphansBefore
		// fsck.fat also judges every tenth cut that left a rename to complete: what it says of
		// the two names is tolerated only there.
		if i%fsckEvery == 0 || len(fails) > 0 || renameCut && tally.renames%10 == 1 || orphanCut && tally.orphans%10 == 1 {
			tally.fsckFat++
			fails = append(fails, fsckFatAtCut(dev, filepath.Join(dir, "cut.img"), renameCut, orphanCut)...)
		}
		tally.cuts++
		if lost > 0 {
			tally.lostCuts++
			tally.lost += uint64(lost)
		}
		if len(fails) > 0 {
			tally.failed++
			if reported < 3 {
				reported++
				t.Errorf("%s (replay with FATVOL_CRASH_SEED and -run '%s'):\n  %s", p, t.Name(), strings.Join(fails, "\n  "))
			}
		}
	}
	return tally
}

// recordCrashWorkload runs w on a fresh volume behind a recording device: the model of what
// must survive, and the log of the requests of its run over the image the setup left.
func recordCrashWorkload(t *testing.T, spec volumeSpec, opts fatvol.Options, w crashWorkload, rnd *rand.Rand) (*crashRun, *crashLog) {
	img := crashImage(t, spec, w)
	f, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	rec := blockdev.NewRecorder(f)
	opts.Logger = quietLogger
	opts.DirtyExpire = time.Hour // writeback happens when the workload asks, not by the clock
	v, err := fatvol.Open(rec, opts)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	r := &crashRun{t: t, v: v, rec: rec, sync: opts.Sync, rnd: rnd,
		model: map[string]*crashEntry{}, known: map[string]bool{}, active: map[string]int{}}
	if w.setup != nil {
		w.setup(r)
	}
	r.check("sync after setup", v.Sync())
	base, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	r.start = rec.Len()
	r.pins, r.active, r.survivors = nil, map[string]int{}, nil
	r.pinAll()
	w.run(r)
	// With no cut at all, the unmounted volume is clean: no dirty bit, no lost cluster, nothing.
	if err := judge.Check(img); err != nil {
		t.Errorf("after the unmount: %v", err)
	}
	return r, newCrashLog(padTo(t, base, img), rec.Ops()[r.start:])
}

// everyCrashPoint cuts at every request of the log: each choice of surviving writes since the
// last flush when there are at most choices of them, else all, none and random ones; each with a
// random number of torn sectors of the request under way.
func everyCrashPoint(l *crashLog, rnd *rand.Rand, choices int) []crashPoint {
	var points []crashPoint
	for k := 0; k <= len(l.ops); k++ {
		w := len(l.window(k))
		tm := l.tornMax(k)
		var keeps [][]bool
		if w < 31 && 1<<w <= choices {
			for m := 0; m < 1<<w; m++ {
				keep := make([]bool, w)
				for i := range keep {
					keep[i] = m&(1<<i) != 0
				}
				keeps = append(keeps, keep)
			}
		} else {
			all, none := make([]bool, w), make([]bool, w)
			for i := range all {
				all[i] = true
			}
			keeps = append(keeps, all, none)
			for len(keeps) < choices {
				keeps = append(keeps, randomKeep(rnd, w))
			}
		}
		for _, keep := range keeps {
			points = append(points, crashPoint{k: k, keep: keep, torn: rnd.IntN(tm + 1), index: len(points)})
		}
	}
	return points
}

// sampleCrashPoints draws n cuts at random requests, in the order the log is replayed.
func sampleCrashPoints(l *crashLog, rnd *rand.Rand, n int) []crashPoint {
	points := make([]crashPoint, n)
	for i := range points {
		k := rnd.IntN(len(l.ops) + 1)
		points[i] = crashPoint{k: k, keep: randomKeep(rnd, len(l.window(k))), torn: rnd.IntN(l.tornMax(k) + 1), index: i}
	}
	sort.SliceStable(points, func(i, j int) bool { return points[i].k < points[j].k })
	return points
}

// randomKeep keeps every write, none, or each with even odds.
func randomKeep(rnd *rand.Rand, w int) []bool {
	keep := make([]bool, w)
	mode := rnd.IntN(4)
	for i := range keep {
		keep[i] = mode == 0 || (mode > 1 && rnd.IntN(2) == 0)
	}
	return keep
}

// checkCrashPoint judges one cut with our fsck and the engine. It returns the lost clusters
// and what failed.
func checkCrashPoint(r *crashRun, p crashPoint, dev *crashDevice, tally *crashTally) (uint32, []string) {
	var fails []string
	lost, beyond, stale, differ, renames, orphans, fsckFails := fsckAtCut(dev, "")
	fails = append(fails, fsckFails...)
	if beyond > 0 {
		tally.beyondSize++
	}
	if stale {
		tally.staleFree++
	}
	if differ {
		tally.fatsDiffer++
		for n := 1; n < 2; n++ {
			other, err := dev.withFATCopy(n)
			if err != nil {
				fails = append(fails, err.Error())
				break
			}
			_, _, _, _, _, _, f := fsckAtCut(other, fmt.Sprintf("with FAT copy %d first: ", n))
			fails = append(fails, f...)
		}
	}
	engineFails, twoNames := engineAtCut(r, p, dev)
	fails = append(fails, engineFails...)
	if renames > 0 || len(twoNames) > 0 {
		tally.renames++
	}
	if orphans > 0 {
		tally.orphans++
	}
	// Under the race detector (fewer cuts, each far slower) every fourth such cut is completed.
	if n := tally.renames + tally.orphans; (renames > 0 || orphans > 0 || len(twoNames) > 0) && (!raceEnabled || n%4 == 1) {
		fails = append(fails, resolvedAtCut(dev, twoNames)...)
	}
	return lost, fails
}

// fsckAtCut runs our fsck and sorts its errors into what a cut may leave and failures.
func fsckAtCut(dev *crashDevice, prefix string) (lost uint32, beyond int, stale, differ bool, renames, orphans int, fails []string) {
	rep, err := fsck.Check(dev)
	if err != nil {
		return 0, 0, false, false, 0, 0, []string{prefix + "fsck.Check: " + err.Error()}
	}
	for _, pr := range rep.Errors() {
		switch pr.Kind {
		case fsck.InterruptedRename:
			// Judged by resolvedAtCut.
			renames++
		case fsck.OrphanLFN:
			// A name crossing sectors cut between its writes; judged by resolvedAtCut.
			orphans++
		case fsck.Dirty, fsck.LostClusters:
		case fsck.FSInfo:
			stale = true
		case fsck.FATMismatch:
			differ = true
		case fsck.ChainLength:
			// A chain longer than the size is a safe size: the file reads whole, and fsck.fat
			// frees the clusters past it. Shorter is not.
			if strings.Contains(pr.Detail, "cluster chain length is >") {
				beyond++
				continue
			}
			fails = append(fails, prefix+"fsck.Check: "+pr.Kind.String()+": "+pr.String())
		default:
			fails = append(fails, prefix+"fsck.Check: "+pr.Kind.String()+": "+pr.String())
		}
	}
	return rep.LostClusters, beyond, stale, differ, renames, orphans, fails
}

// engineAtCut opens the cut image with the engine, reads everything, and checks the pins and
// the survivors of renames. It returns the survivors found under more than one name.
func engineAtCut(r *crashRun, p crashPoint, dev *crashDevice) ([]string, []crashSurvivor) {
	v, err := fatvol.Open(dev, fatvol.Options{ReadOnly: true, Logger: quietLogger})
	if err != nil {
		return []string{"engine open: " + err.Error()}, nil
	}
	defer v.Close()
	var fails []string
	err = fs.WalkDir(v, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			fails = append(fails, "engine walk: "+err.Error())
			return nil
		}
		if !d.IsDir() {
			if _, err := readAllFrom(v, path); err != nil {
				fails = append(fails, "engine read: "+err.Error())
			}
		}
		return nil
	})
	if err != nil {
		fails = append(fails, "engine walk: "+err.Error())
	}
	survivorFails, twoNames := survivorsAtCut(v, r.activeSurvivors(p.k))
	fails = append(fails, survivorFails...)
	for _, pin := range r.activePins(p.k) {
		fi, err := v.Stat(pin.path)
		switch {
		case pin.want == nil:
			if err == nil {
				fails = append(fails, fmt.Sprintf("%s: exists, but its removal was durable from request %d", pin.path, pin.from))
			}
		case err != nil:
			fails = append(fails, fmt.Sprintf("%s: durable from request %d, but: %v", pin.path, pin.from, err))
		case pin.want.dir:
			if !fi.IsDir() {
				fails = append(fails, fmt.Sprintf("%s: a directory durable from request %d is not one", pin.path, pin.from))
			}
		default:
			got, err := readAllFrom(v, pin.path)
			if err != nil {
				fails = append(fails, fmt.Sprintf("%s: durable from request %d, read: %v", pin.path, pin.from, err))
			} else if !slices.Equal(got, pin.want.data) {
				fails = append(fails, fmt.Sprintf("%s: content durable from request %d differs: %s", pin.path, pin.from, describeDiff(pin.want.data, got)))
			}
		}
	}
	return fails, twoNames
}

// holds tells whether the volume has want at path: a directory, or a file with exactly its bytes.
func holds(v *fatvol.Volume, path string, want *crashEntry) bool {
	fi, err := v.Stat(path)
	if err != nil || fi.IsDir() != want.dir {
		return false
	}
	if want.dir {
		return want.cluster == 0 || fi.Sys().(*fatvol.Attr).FirstCluster == want.cluster
	}
	got, err := readAllFrom(v, path)
	return err == nil && slices.Equal(got, want.data)
}

// survivorsAtCut checks that every file durable before a rename is under one of its names with
// its durable bytes. It returns the survivors found under two names, with those names as their
// candidates, the newest last.
func survivorsAtCut(v *fatvol.Volume, survivors []crashSurvivor) (fails []string, twoNames []crashSurvivor) {
	for _, s := range survivors {
		var names []string
		var present []crashPin
		for _, c := range s.cands {
			names = append(names, c.path)
			if holds(v, c.path, c.want) && !slices.ContainsFunc(present, func(p crashPin) bool { return p.path == c.path }) {
				present = append(present, c)
			}
		}
		switch {
		case len(present) == 0:
			fails = append(fails, fmt.Sprintf("durable before the rename at request %d, found under none of its names %q with its content", s.from, names))
		case len(present) > 1:
			twoNames = append(twoNames, crashSurvivor{cands: present, from: s.from})
		}
	}
	return fails, twoNames
}

// resolvedAtCut completes the renames a cut left half done, once by the engine's open for
// writing and once by fsck.Repair, each on its own copy of the medium: each must leave a volume
// with no rename left to complete and nothing but what a cut may leave, and every file found
// under two names under its newest one only, with its bytes.
func resolvedAtCut(dev *crashDevice, twoNames []crashSurvivor) []string {
	var fails []string
	byEngine := dev.copyToRepair()
	v, err := fatvol.Open(byEngine, fatvol.Options{Logger: quietLogger})
	if err == nil {
		err = v.Close()
	}
	if err != nil {
		fails = append(fails, "engine open for writing: "+err.Error())
	} else {
		fails = append(fails, resolvedOn(byEngine, "after the engine's open: ", twoNames)...)
	}
	byRepair := dev.copyToRepair()
	res, err := fsck.Repair(byRepair)
	switch {
	case err != nil:
		fails = append(fails, "fsck.Repair: "+err.Error())
	case len(res.Unrepairable) > 0:
		fails = append(fails, fmt.Sprintf("fsck.Repair refused: %v", res.Unrepairable))
	case !res.Clean():
		fails = append(fails, fmt.Sprintf("fsck.Repair left: %v", res.After.Errors()))
	default:
		fails = append(fails, resolvedOn(byRepair, "after fsck.Repair: ", twoNames)...)
	}
	return fails
}

func resolvedOn(dev *crashDevice, prefix string, twoNames []crashSurvivor) []string {
	_, _, _, _, renames, orphans, fails := fsckAtCut(dev, prefix)
	if renames > 0 || orphans > 0 {
		fails = append(fails, fmt.Sprintf("%s%d renames left to complete, %d orphaned long names left", prefix, renames, orphans))
	}
	v, err := fatvol.Open(dev, fatvol.Options{ReadOnly: true, Logger: quietLogger})
	if err != nil {
		return append(fails, prefix+"engine open: "+err.Error())
	}
	defer v.Close()
	for _, s := range twoNames {
		newest := s.cands[len(s.cands)-1]
		if !holds(v, newest.path, newest.want) {
			fails = append(fails, fmt.Sprintf("%s%s: the newest name of a file found under %d names does not hold it", prefix, newest.path, len(s.cands)))
		}
		for _, c := range s.cands[:len(s.cands)-1] {
			if _, err := v.Stat(c.path); err == nil {
				fails = append(fails, fmt.Sprintf("%s%s: an older name of a file found under %d names is still there", prefix, c.path, len(s.cands)))
			}
		}
	}
	return fails
}

// fsckFatTolerated are fsck.fat's lines about what a cut may leave: the dirty bit, lost
// clusters, the FSINFO free count, FAT copies that differ, the backup boot sector's state byte
// and (a growth cut between the two boot sectors) its total sectors.
var fsckFatTolerated = regexp.MustCompile(`^(Dirty bit is set\. Fs was not properly unmounted and some data may be corrupt\.|Automatically removing dirty bit\.|Leaving filesystem unchanged\.|exit status 1|Reclaimed \d+ unused clusters? \(\d+ bytes\)( in \d+ chains?)?\.|Free cluster summary wrong \(\d+ vs\. really \d+\)|Auto-correcting\.|FATs differ but appear to be intact\.|Using first FAT\.|There are differences between boot sector and its backup\.|This is mostly harmless\. Differences: \(offset:original/backup\)|(37|65):0[01]/0[01]|((3[2-5]:[0-9a-f]{2}/[0-9a-f]{2}|65:0[01]/0[01])(, |$))+|Not automatically fixing this\.)$`)

// fsckFatChainBeyondSize is fsck.fat's complaint about a file whose chain is longer than its
// size, with the truncation to that same size that follows: the clusters past the size are
// freed, the file keeps its size.
var fsckFatChainBeyondSize = regexp.MustCompile(`^File size is (\d+) bytes, cluster chain length is > \d+ bytes\.$|^Truncating file to (\d+) bytes\.$`)

// fsckFatRename is what fsck.fat says about the two names of a file a cut left in the middle of a
// rename: it knows nothing of the mark, sees two files sharing clusters and would cut the second
// to nothing. Tolerated only where our fsck found a rename to complete (and the harness judged
// its completion).
var fsckFatRename = regexp.MustCompile(`^(share clusters\.|Truncating second to 0 bytes\.|File size is \d+ bytes, cluster chain length is 0 bytes\.|Truncating file to 0 bytes\.|Invalid '\.\.' entry in the second slot\. Fixing\.)$`)

// fsckFatOrphan is what fsck.fat says of the long-name entries a cut left without their short
// entry (a name crossing sectors, created or removed): it deletes them. Tolerated only where our
// fsck found them too (and the harness judged their deletion).
var fsckFatOrphan = regexp.MustCompile(`^(Orphaned long file name part ".*"|Auto-deleting\.)$`)

// fsckFatAtCut writes the cut image and runs fsck.fat -n over it. A line that starts with '/'
// names the file the indented lines after it are about.
func fsckFatAtCut(dev *crashDevice, path string, renameCut, orphanCut bool) []string {
	if err := dev.writeFile(path); err != nil {
		return []string{err.Error()}
	}
	lines, err := judge.FsckFat(path)
	if err != nil {
		return []string{err.Error()}
	}
	var fails []string
	file, size := "", ""
	for _, l := range lines {
		if strings.HasPrefix(l, "/") {
			file, size = l, ""
			continue
		}
		msg := strings.TrimSpace(l)
		if fsckFatTolerated.MatchString(msg) || renameCut && fsckFatRename.MatchString(msg) || orphanCut && fsckFatOrphan.MatchString(msg) {
			continue
		}
		if m := fsckFatChainBeyondSize.FindStringSubmatch(msg); m != nil && file != "" {
			switch {
			case m[1] != "":
				size = m[1]
				continue
			case m[2] == size:
				continue
			}
		}
		fails = append(fails, "fsck.fat: "+strings.TrimSpace(file+" "+msg))
	}
	return fails
}
