package fatvol_test

import (
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// crashRun drives a workload over a recording device and keeps a model of what must survive a
// power cut: a pin says that a path holds given content (or is a directory, or is absent) at
// every cut from the request where it became durable (an fsync, a syncfs, an operation completed
// in sync mode, the unmount) until the next operation that changes that path began.
type crashRun struct {
	t     testing.TB
	v     *fatvol.Volume
	rec   *blockdev.Recorder
	start int // the log position where the recorded workload begins
	sync  bool
	rnd   *rand.Rand

	model     map[string]*crashEntry // present paths
	known     map[string]bool        // every path ever used, so absence can be pinned too
	pins      []crashPin
	active    map[string]int // path -> its pin in force
	survivors []crashSurvivor
}

// crashSurvivor is a file or directory that was durable when a rename began: at every cut from
// then on (until an operation other than a rename changes it or a rename replaces it) it must be
// under one of the names the renames gave it, with its durable content. Candidates come in the
// order the renames made them: the last present one is the newest name.
type crashSurvivor struct {
	cands       []crashPin // path and content; from and until unused
	from, until int
}

// names tells whether p is one of the survivor's candidate paths.
func (s *crashSurvivor) names(p string) bool {
	for _, c := range s.cands {
		if c.path == p {
			return true
		}
	}
	return false
}

// crashEntry is what the model holds at a path: a directory, or a file's content.
type crashEntry struct {
	dir     bool
	data    []byte
	cluster uint32 // a directory's first cluster, when it must be that one
}

type crashPin struct {
	path        string
	want        *crashEntry // nil: the path must not exist
	from, until int         // the pin holds for cuts at requests k with from <= k < until
}

func (r *crashRun) pos() int { return r.rec.Len() - r.start }

// touch ends the pins of paths an operation is about to change: from its first request on, a
// cut may leave them in either state.
func (r *crashRun) touch(paths ...string) {
	r.endSurvivors(paths...)
	r.touchPins(paths...)
}

// endSurvivors ends the survivors that have one of paths among their names: an operation is about
// to change what is there.
func (r *crashRun) endSurvivors(paths ...string) {
	for i := range r.survivors {
		s := &r.survivors[i]
		if s.until != math.MaxInt {
			continue
		}
		for _, p := range paths {
			if s.names(p) {
				s.until = r.pos()
				break
			}
		}
	}
}

func (r *crashRun) touchPins(paths ...string) {
	for _, p := range paths {
		if i, ok := r.active[p]; ok {
			r.pins[i].until = r.pos()
			delete(r.active, p)
		}
	}
}

// pin records the model's state of paths as durable from now on.
func (r *crashRun) pin(paths ...string) {
	for _, p := range paths {
		r.touch(p)
		var want *crashEntry
		if e := r.model[p]; e != nil {
			want = &crashEntry{dir: e.dir, data: slices.Clone(e.data)}
		}
		r.active[p] = len(r.pins)
		r.pins = append(r.pins, crashPin{path: p, want: want, from: r.pos(), until: math.MaxInt})
	}
}

// done ends an operation: in sync mode what it did is durable.
func (r *crashRun) done(paths ...string) {
	if r.sync {
		r.pin(paths...)
	}
}

// pinAll pins every path the workload has used.
func (r *crashRun) pinAll() {
	var all []string
	for p := range r.known {
		all = append(all, p)
	}
	slices.Sort(all)
	r.pin(all...)
}

func (r *crashRun) use(p string) { r.known[p] = true }

func (r *crashRun) check(what string, err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
}

func (r *crashRun) data(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.rnd.Uint32())
	}
	return b
}

// under is p and every modelled path below it.
func (r *crashRun) under(p string) []string {
	out := []string{p}
	for q := range r.model {
		if strings.HasPrefix(q, p+"/") {
			out = append(out, q)
		}
	}
	return out
}

// create makes a file and writes data to it through one handle, each call its own operation.
func (r *crashRun) create(p string, data []byte) {
	r.use(p)
	r.touch(p)
	f, err := r.v.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	r.check("create "+p, err)
	r.model[p] = &crashEntry{}
	r.done(p)
	if len(data) > 0 {
		r.touch(p)
		_, err = f.Write(data)
		r.check("write "+p, err)
		r.model[p].data = slices.Clone(data)
		r.done(p)
	}
	r.check("close "+p, f.Close())
}

// writeAt overwrites or extends a file at off.
func (r *crashRun) writeAt(p string, off int64, data []byte) {
	r.touch(p)
	f, err := r.v.OpenFile(p, os.O_RDWR, 0)
	r.check("open "+p, err)
	_, err = f.WriteAt(data, off)
	r.check("write "+p, err)
	e := r.model[p]
	if end := off + int64(len(data)); end > int64(len(e.data)) {
		e.data = append(e.data, make([]byte, end-int64(len(e.data)))...)
	}
	copy(e.data[off:], data)
	r.done(p)
	r.check("close "+p, f.Close())
}

func (r *crashRun) appendTo(p string, data []byte) {
	r.touch(p)
	f, err := r.v.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	r.check("open "+p, err)
	_, err = f.Write(data)
	r.check("append "+p, err)
	r.model[p].data = append(r.model[p].data, data...)
	r.done(p)
	r.check("close "+p, f.Close())
}

func (r *crashRun) truncate(p string, size int64) {
	r.touch(p)
	r.check("truncate "+p, r.v.Truncate(p, size))
	e := r.model[p]
	if size <= int64(len(e.data)) {
		e.data = e.data[:size]
	} else {
		e.data = append(e.data, make([]byte, size-int64(len(e.data)))...)
	}
	r.done(p)
}

// fallocate allocates [off, off+length) through a handle; the close drops what lies past the end.
func (r *crashRun) fallocate(p string, off, length int64, keepSize bool) {
	r.touch(p)
	f, err := r.v.OpenFile(p, os.O_RDWR, 0)
	r.check("open "+p, err)
	r.check("fallocate "+p, f.Fallocate(off, length, keepSize))
	e := r.model[p]
	if end := off + length; !keepSize && end > int64(len(e.data)) {
		e.data = append(e.data, make([]byte, end-int64(len(e.data)))...)
	}
	r.done(p)
	r.check("close "+p, f.Close())
}

func (r *crashRun) rename(from, to string) {
	paths := append(r.under(from), r.under(to)...)
	r.renameSurvivors(from, to)
	r.touchPins(paths...)
	r.check("rename "+from+" "+to, r.v.Rename(from, to))
	for _, p := range r.under(to) {
		delete(r.model, p)
	}
	for _, p := range r.under(from) {
		if e := r.model[p]; e != nil {
			q := to + strings.TrimPrefix(p, from)
			r.model[q] = e
			r.use(q)
			paths = append(paths, q)
			delete(r.model, p)
		}
	}
	r.done(paths...)
}

// renameSurvivors records what a rename of from to to must keep at every cut: a durable file (or
// directory, with what lies below it) is under its old name or its new one; a durable target it
// replaces keeps its name, with its old content or the renamed file's.
func (r *crashRun) renameSurvivors(from, to string) {
	start := r.pos()
	durable := func(p string) *crashEntry {
		i, ok := r.active[p]
		if !ok || r.pins[i].want == nil {
			return nil
		}
		want := r.pins[i].want
		if want.dir {
			// A directory is told from another by its cluster, not by its name.
			fi, err := r.v.Stat(p)
			r.check("stat "+p, err)
			want = &crashEntry{dir: true, cluster: fi.Sys().(*fatvol.Attr).FirstCluster}
		}
		return want
	}
	var add []crashSurvivor
	if tgt, src := durable(to), durable(from); tgt != nil && src != nil && r.model[to] != nil {
		add = append(add, crashSurvivor{cands: []crashPin{{path: to, want: tgt}, {path: to, want: src}}, from: start, until: math.MaxInt})
	}
	// A rename over a survivor's name ends what the survivor promised there.
	r.endSurvivors(r.under(to)...)
	for _, p := range r.under(from) {
		if r.model[p] == nil {
			continue
		}
		q := to + strings.TrimPrefix(p, from)
		extended := false
		for i := range r.survivors {
			s := &r.survivors[i]
			if s.until != math.MaxInt {
				continue
			}
			// The rename moves what is at p now: its newest candidate there. An older one (a
			// target a rename over p replaced) stays behind, gone once that rename is done.
			for j := len(s.cands) - 1; j >= 0; j-- {
				if c := s.cands[j]; c.path == p {
					s.cands = append(s.cands, crashPin{path: q, want: c.want})
					extended = true
					break
				}
			}
		}
		if want := durable(p); want != nil && !extended {
			add = append(add, crashSurvivor{cands: []crashPin{{path: p, want: want}, {path: q, want: want}}, from: start, until: math.MaxInt})
		}
	}
	r.survivors = append(r.survivors, add...)
}

// activeSurvivors are the survivors in force for a cut at request k.
func (r *crashRun) activeSurvivors(k int) []crashSurvivor {
	var out []crashSurvivor
	for _, s := range r.survivors {
		if s.from <= k && k < s.until {
			out = append(out, s)
		}
	}
	return out
}

// holdOpen opens a file and keeps the handle, so that a removal makes it an orphan whose clusters
// go at its last close, or at the unmount.
func (r *crashRun) holdOpen(p string) *fatvol.File {
	f, err := r.v.OpenFile(p, os.O_RDWR, 0)
	r.check("open "+p, err)
	return f
}

// exchange swaps two files' contents, each keeping its name (RENAME_EXCHANGE).
func (r *crashRun) exchange(a, b string) {
	r.touch(a, b)
	r.check("exchange "+a+" "+b, r.v.RenameWithFlags(a, b, fatvol.RenameExchange))
	r.model[a], r.model[b] = r.model[b], r.model[a]
	r.done(a, b)
}

func (r *crashRun) remove(p string) {
	r.touch(p)
	r.check("remove "+p, r.v.Remove(p))
	delete(r.model, p)
	r.done(p)
}

func (r *crashRun) mkdir(p string) {
	r.use(p)
	r.touch(p)
	r.check("mkdir "+p, r.v.Mkdir(p))
	r.model[p] = &crashEntry{dir: true}
	r.done(p)
}

// fsync makes one file durable: only that file is pinned, as fsync promises no more.
func (r *crashRun) fsync(p string) {
	f, err := r.v.OpenFile(p, os.O_RDWR, 0)
	r.check("open "+p, err)
	r.check("fsync "+p, f.Sync())
	r.pin(p)
	r.check("close "+p, f.Close())
}

// syncfs makes the whole volume durable.
func (r *crashRun) syncfs() {
	r.check("sync", r.v.Sync())
	r.pinAll()
}

// unmount closes the volume: everything is durable, and the dirty bit is cleared.
func (r *crashRun) unmount() {
	r.check("close volume", r.v.Close())
	r.pinAll()
}

// activePins are the pins in force for a cut at request k.
func (r *crashRun) activePins(k int) []crashPin {
	var out []crashPin
	for _, p := range r.pins {
		if p.from <= k && k < p.until {
			out = append(out, p)
		}
	}
	return out
}

// readAllFrom reads a whole file of the volume.
func readAllFrom(v *fatvol.Volume, name string) ([]byte, error) {
	f, err := v.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
