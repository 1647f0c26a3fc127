package fatfuse

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// recSize is the length of one numbered record.
const recSize = 64

func record(kind string, i int) []byte {
	b := fmt.Appendf(nil, "%s %08d ", kind, i)
	b = append(b, bytes.Repeat([]byte{'a' + byte(i%26)}, recSize-1-len(b))...)
	return append(b, '\n')
}

// pauses keeps the longest operation each worker saw in each phase of a test (a phase starts
// at each kill or hand-over): past the worker's usual, the pause the application saw.
type pauses struct {
	phase atomic.Int32
	mu    sync.Mutex
	worst map[pauseKey]time.Duration
}

type pauseKey struct {
	worker string
	phase  int32
}

func (p *pauses) op(worker string, f func() error) error {
	k := pauseKey{worker, p.phase.Load()}
	start := time.Now()
	err := f()
	d := time.Since(start)
	p.mu.Lock()
	p.worst[k] = max(p.worst[k], d)
	p.mu.Unlock()
	return err
}

// appLoad is an application on the mount: an O_DSYNC appender, a writer that fsyncs each
// record (rewriting it by position after an EIO, which tells it the record may be lost), a bulk
// writer that never fsyncs, a reader that checks a file's checksum with its pages dropped each
// round, and a creator that makes, writes and renames files.
type appLoad struct {
	t      *testing.T
	dir    string
	stop   chan struct{}
	wg     sync.WaitGroup
	p      *pauses
	bigSum [32]byte

	dsynced, fsynced, renamed, reads atomic.Int64
	fsyncEIO, bulkEIO, bulkWrites    atomic.Int64
	renameEIO                        atomic.Int64
}

func startAppLoad(t *testing.T, dir string) *appLoad {
	w := &appLoad{t: t, dir: dir, stop: make(chan struct{}), p: &pauses{worst: map[pauseKey]time.Duration{}}}
	big := make([]byte, 4<<20)
	rand.Read(big)
	w.bigSum = sha256.Sum256(big)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(){w.dsyncAppender, w.fsyncWriter, w.bulkWriter, w.reader, w.renamer} {
		w.wg.Add(1)
		go func() { defer w.wg.Done(); f() }()
	}
	return w
}

func (w *appLoad) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// finish stops the workers; one that does not stop hangs on a request nobody answers.
func (w *appLoad) finish() {
	close(w.stop)
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		w.t.Fatal("the application hangs: a request is never answered")
	}
}

func (w *appLoad) dsyncAppender() {
	f, err := os.OpenFile(filepath.Join(w.dir, "dsync.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_DSYNC, 0o644)
	if err != nil {
		w.t.Error(err)
		return
	}
	defer f.Close()
	for i := 0; !w.stopped(); i++ {
		if err := w.p.op("O_DSYNC append", func() error { _, err := f.Write(record("dsync", i)); return err }); err != nil {
			w.t.Errorf("dsync record %d: %v", i, err)
			return
		}
		w.dsynced.Store(int64(i + 1))
	}
}

func (w *appLoad) fsyncWriter() {
	f, err := os.OpenFile(filepath.Join(w.dir, "fsync.log"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		w.t.Error(err)
		return
	}
	defer f.Close()
	for i := 0; !w.stopped(); {
		err := w.p.op("write+fsync", func() error {
			if _, err := f.WriteAt(record("fsync", i), int64(i)*recSize); err != nil {
				return err
			}
			return f.Sync()
		})
		switch {
		case errors.Is(err, syscall.EIO):
			w.fsyncEIO.Add(1) // written again at the same place
		case err != nil:
			w.t.Errorf("fsync record %d: %v", i, err)
			return
		default:
			i++
			w.fsynced.Store(int64(i))
		}
	}
}

func (w *appLoad) bulkWriter() {
	f, err := os.OpenFile(filepath.Join(w.dir, "bulk.bin"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		w.t.Error(err)
		return
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{'b'}, 256<<10)
	for i := 0; !w.stopped(); i++ {
		_, err := f.WriteAt(chunk, int64(i%32)*int64(len(chunk)))
		switch {
		case errors.Is(err, syscall.EIO):
			w.bulkEIO.Add(1)
		case err != nil:
			w.t.Errorf("bulk write: %v", err)
			return
		}
		w.bulkWrites.Add(1)
		time.Sleep(5 * time.Millisecond)
	}
}

func (w *appLoad) reader() {
	name := filepath.Join(w.dir, "big.bin")
	for !w.stopped() {
		err := w.p.op("read 4 MiB", func() error {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			// Dropped from the page cache, so the reads reach the server.
			unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			h := sha256.New()
			buf := make([]byte, 1<<20)
			for {
				n, err := f.Read(buf)
				h.Write(buf[:n])
				if n == 0 || err != nil {
					break
				}
			}
			if !bytes.Equal(h.Sum(nil), w.bigSum[:]) {
				return errors.New("checksum differs")
			}
			return nil
		})
		if err != nil {
			w.t.Errorf("read big.bin: %v", err)
			return
		}
		w.reads.Add(1)
	}
}

func (w *appLoad) renamer() {
	d := filepath.Join(w.dir, "d")
	for i := 0; !w.stopped(); {
		from, to := filepath.Join(d, fmt.Sprintf("f%05d", i)), filepath.Join(d, fmt.Sprintf("g%05d", i))
		err := w.p.op("create+rename", func() error {
			// A step an EIO cut short is done again from its start.
			for _, name := range []string{from, to} {
				if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
			f, err := os.OpenFile(from, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_DSYNC, 0o644)
			if err != nil {
				return err
			}
			_, err = f.Write(record("file", i))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := os.Rename(from, to); err != nil {
				return err
			}
			dir, err := os.Open(d)
			if err != nil {
				return err
			}
			defer dir.Close()
			return dir.Sync()
		})
		switch {
		case errors.Is(err, syscall.EIO):
			w.renameEIO.Add(1)
		case err != nil:
			w.t.Errorf("file %d: %v", i, err)
			return
		default:
			i++
			w.renamed.Store(int64(i))
		}
	}
}

// check finds every acknowledged record and file in place.
func (w *appLoad) check() {
	t := w.t
	for _, l := range []struct {
		name, kind string
		n          int64
	}{{"dsync.log", "dsync", w.dsynced.Load()}, {"fsync.log", "fsync", w.fsynced.Load()}} {
		b, err := os.ReadFile(filepath.Join(w.dir, l.name))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) < l.n*recSize {
			t.Errorf("%s: %d bytes, %d records were acknowledged", l.name, len(b), l.n)
			continue
		}
		for i := 0; i < int(l.n); i++ {
			if got := b[i*recSize : (i+1)*recSize]; !bytes.Equal(got, record(l.kind, i)) {
				t.Errorf("%s: record %d is %q", l.name, i, got)
				break
			}
		}
	}
	for i := 0; i < int(w.renamed.Load()); i++ {
		d := filepath.Join(w.dir, "d")
		b, err := os.ReadFile(filepath.Join(d, fmt.Sprintf("g%05d", i)))
		if err != nil || !bytes.Equal(b, record("file", i)) {
			t.Errorf("renamed file %d: %q, %v", i, b, err)
		}
		if _, err := os.Stat(filepath.Join(d, fmt.Sprintf("f%05d", i))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("file %d still under its first name: %v", i, err)
		}
	}
}

// TestTakeOver: a server process is killed twice with SIGKILL under an application's steady
// load, and a new one takes the live connection over each time; then a planned hand-over. The
// reader and the O_DSYNC appender see no error; every acknowledged record is there byte for byte
// and every rename synced resolves; the writer that never fsyncs gets EIO at most once per crash
// (not when another's fsync had written its writes back) and never at the hand-over; the fsyncing writer gets EIO at most once per crash (only when the
// kill fell between a write and its fsync), the creator at most twice (a create or rename the
// crash lost: at the write to the file, at the directory's fsync); some requests were in flight
// at the kills and came again; fsck.fat finds the volume clean.
func TestTakeOver(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	h := hold(t, makeImage(t, 64<<10, "-F", "32"))
	h.start("serve")
	w := startAppLoad(t, h.dir)
	const run = 1500 * time.Millisecond
	const crashes = 2
	var takeovers, gaps []time.Duration
	var resent []uint64
	takeOver := func(since time.Time) {
		took, n := h.start("takeover")
		takeovers, resent = append(takeovers, took), append(resent, n)
		gaps = append(gaps, h.readyAt.Sub(since))
	}
	for range crashes {
		time.Sleep(run)
		writes := w.bulkWrites.Load()
		w.p.phase.Add(1)
		killed := time.Now()
		h.kill()
		takeOver(killed)
		if writes == 0 {
			t.Fatal("no bulk write before the kill")
		}
	}
	time.Sleep(run)
	w.p.phase.Add(1)
	eioBefore := w.bulkEIO.Load()
	paused := time.Now()
	h.pause()
	takeOver(paused)
	time.Sleep(run)
	w.finish()
	if t.Failed() {
		return
	}
	w.check()
	// Another worker's fsync writes the whole volume back, and with it the bulk writer's writes
	// that had reached the engine: a crash then loses nothing of it, and it is told nothing.
	if got := w.bulkEIO.Load(); got > crashes || eioBefore != got {
		t.Errorf("the writer that never fsyncs got EIO %d times (%d before the hand-over); want at most once per crash (%d), none at the hand-over", got, eioBefore, crashes)
	}
	if resent[0]+resent[1] == 0 {
		t.Errorf("no request in flight at either kill: the kernel sent none again")
	}
	// A create or rename the crash lost fails the write to the file or the directory's fsync.
	if got := w.renameEIO.Load(); got > 2*crashes {
		t.Errorf("the creator got EIO %d times in %d crashes", got, crashes)
	}
	if got := w.fsyncEIO.Load(); got > crashes {
		t.Errorf("the fsyncing writer got EIO %d times in %d crashes", got, crashes)
	}
	t.Logf("acknowledged: %d O_DSYNC records, %d fsynced records (%d EIO), %d renamed files (%d EIO), %d checked reads of 4 MiB",
		w.dsynced.Load(), w.fsynced.Load(), w.fsyncEIO.Load(), w.renamed.Load(), w.renameEIO.Load(), w.reads.Load())
	for ph := int32(0); ph <= w.p.phase.Load(); ph++ {
		what := "before any kill"
		switch {
		case ph > 0 && ph <= crashes:
			what = fmt.Sprintf("SIGKILL %d (serving again %v after it, TakeOver %v, %d requests resent)",
				ph, gaps[ph-1].Round(time.Millisecond), takeovers[ph-1], resent[ph-1])
		case ph > crashes:
			what = fmt.Sprintf("Pause (serving again %v after it, TakeOver %v, %d requests resent)",
				gaps[ph-1].Round(time.Millisecond), takeovers[ph-1], resent[ph-1])
		}
		line := "longest operation, " + what + ":"
		for _, worker := range []string{"O_DSYNC append", "write+fsync", "create+rename", "read 4 MiB"} {
			line += fmt.Sprintf(" %s %v;", worker, w.p.worst[pauseKey{worker, ph}].Round(time.Millisecond))
		}
		t.Log(line)
	}
	h.unmount()
	fsckClean(t, h.img)
}
