package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// The pod figures of the chart's defaults: a mounter pod's memory limit is memoryOverhead
// (160Mi) plus the volume's cacheSize (64Mi).
const scalePodLimit = (160 + 64) << 20

// TestScale serves a volume of many files (CSI_FAT_SCALE_FILES, 300,000 by default, in
// directories of 300) with `csi-fat mount` held to a mounter pod's default figures: the Go
// runtime's limit, the node budget and the directory cache from -memory-limit, and a memory
// cgroup at the pod's limit. It creates every file through the mount, then a fresh mount walks,
// stats and reads every one, then renames and removes files while they are open and writes
// through their handles. No server may be killed or fail a request, fsck.fat -n must find the
// volume clean, and each server's peak resident memory is printed. It runs in a stage of its
// own (.ci/run): CSI_FAT_SCALE=1.
func TestScale(t *testing.T) {
	if os.Getenv("CSI_FAT_SCALE") == "" {
		testenv.Separate(t, "the scale test runs in a stage of its own: CSI_FAT_SCALE=1 go test -count=1 -run '^TestScale$' ./cmd/csi-fat/ (.ci/run)")
	}
	files := 300000
	if s := os.Getenv("CSI_FAT_SCALE_FILES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 {
			t.Fatalf("CSI_FAT_SCALE_FILES=%q: want a count of at least 1000", s)
		}
		files = n
	}
	const perDir = 300
	dirs := (files + perDir - 1) / perDir
	mountTools(t, "fsck.fat")
	bin := buildCsiFat(t)

	// 4 KiB clusters, a cluster a file, and room for a tenth more.
	img := filepath.Join(t.TempDir(), "vol.img")
	kib := int64(files)*4*11/10 + 64<<10
	if out, err := exec.Command("mkfs.fat", "-F", "32", "-s", "8", "-C", img, strconv.FormatInt(kib, 10)).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat: %v\n%s", err, out)
	}
	nameOf := func(i int) string { return fmt.Sprintf("directory %04d/file %07d with a long name.txt", i/perDir, i) }
	content := func(i int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("%07d ", i)), 25) // 200 bytes
	}

	// 1: create.
	srv := startScaleServer(t, bin, img, "create")
	start := time.Now()
	forEach(t, 4, dirs, func(d int) error {
		if err := os.Mkdir(filepath.Join(srv.dir, fmt.Sprintf("directory %04d", d)), 0o755); err != nil {
			return err
		}
		for i := d * perDir; i < min(files, (d+1)*perDir); i++ {
			if err := os.WriteFile(filepath.Join(srv.dir, nameOf(i)), content(i), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	created := time.Since(start)
	srv.stop(t)
	t.Logf("created %d files in %d directories in %.1f s (%.0f files/s); server: %s", files, dirs, created.Seconds(), float64(files)/created.Seconds(), srv.figures)

	// 2: a fresh mount walks, stats and reads every file.
	srv = startScaleServer(t, bin, img, "walk")
	start = time.Now()
	var seen atomic.Int64
	forEach(t, 4, dirs, func(d int) error {
		dir := filepath.Join(srv.dir, fmt.Sprintf("directory %04d", d))
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			var i int
			if _, err := fmt.Sscanf(e.Name(), "file %07d", &i); err != nil || !bytes.Equal(data, content(i)) || fi.Size() != 200 {
				return fmt.Errorf("%s: %d bytes, %q", p, fi.Size(), data)
			}
			seen.Add(1)
		}
		return nil
	})
	walked := time.Since(start)
	if seen.Load() != int64(files) {
		t.Fatalf("the walk found %d files, %d were made", seen.Load(), files)
	}

	// 3: files held open are renamed or removed, and written through their handles.
	step := max(files/1000, 1)
	type held struct {
		f       *os.File
		i       int
		to      string // "" when removed
		ino     uint64
		written []byte
	}
	var open []held
	for i := 0; i < files; i += step {
		f, err := os.OpenFile(filepath.Join(srv.dir, nameOf(i)), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		h := held{f: f, i: i, ino: st.Ino, written: []byte(fmt.Sprintf("written while open %07d", i))}
		if len(open)%2 == 0 {
			h.to = fmt.Sprintf("directory %04d/moved %07d.txt", (i/perDir+1)%dirs, i)
			if err := os.Rename(filepath.Join(srv.dir, nameOf(i)), filepath.Join(srv.dir, h.to)); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Remove(filepath.Join(srv.dir, nameOf(i))); err != nil {
			t.Fatal(err)
		}
		open = append(open, h)
	}
	// Another pass over every directory, so that those of the open files would be dropped
	// were they not held.
	forEach(t, 4, dirs, func(d int) error {
		_, err := os.ReadDir(filepath.Join(srv.dir, fmt.Sprintf("directory %04d", d)))
		return err
	})
	for _, h := range open {
		if _, err := h.f.WriteAt(h.written, 0); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(h.f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 200)
		if _, err := h.f.ReadAt(got, 0); err != nil || st.Ino != h.ino || !bytes.Equal(got, append(bytes.Clone(h.written), content(h.i)[len(h.written):]...)) {
			t.Fatalf("file %d held open: inode %d (was %d), %q, %v", h.i, st.Ino, h.ino, got, err)
		}
		if err := h.f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range open {
		_, err := os.Stat(filepath.Join(srv.dir, nameOf(h.i)))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s after its rename or removal: %v", nameOf(h.i), err)
		}
		if h.to == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(srv.dir, h.to))
		if err != nil || !bytes.HasPrefix(data, h.written) {
			t.Fatalf("%s: %q, %v", h.to, data, err)
		}
	}
	srv.stop(t)
	t.Logf("a fresh mount walked, stat and read %d files in %.1f s (%.0f files/s), then renamed %d and removed %d while open; server: %s",
		files, walked.Seconds(), float64(files)/walked.Seconds(), (len(open)+1)/2, len(open)/2, srv.figures)

	start = time.Now()
	if clean, out := fsckOutput(t, img); !clean {
		t.Fatalf("fsck.fat -n after the scale test:\n%s", out)
	}
	t.Logf("fsck.fat -n clean in %.1f s", time.Since(start).Seconds())
}

// scaleServer is `csi-fat mount -memory-limit` at the pod's limit, in a memory cgroup at it.
type scaleServer struct {
	*mountProcess
	cg      *memCgroup
	pid     int
	figures string // its memory, once stopped
}

func startScaleServer(t *testing.T, bin, img, name string) *scaleServer {
	t.Helper()
	s := &scaleServer{cg: newMemCgroup(t, name, scalePodLimit)}
	s.mountProcess = startMountWith(t, bin, img, func(pid int) { s.cg.add(t, pid); s.pid = pid },
		"-memory-limit", strconv.Itoa(scalePodLimit))
	return s
}

// stop unmounts (SIGTERM), requires a clean exit and no OOM kill, and notes the peaks.
func (s *scaleServer) stop(t *testing.T) {
	t.Helper()
	rss := residentPeak(s.pid)
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Fatalf("csi-fat mount: %v (OOM kills in its cgroup: %d)\n%s", err, s.cg.oomKills(t), s.stderr)
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("csi-fat mount did not exit\n%s", s.stderr)
	}
	if n := s.cg.oomKills(t); n > 0 {
		t.Fatalf("%d OOM kills in the server's cgroup", n)
	}
	s.figures = fmt.Sprintf("peak resident %.1f MiB (the cgroup's peak with the page cache charged to it %.1f MiB, limit %d MiB)",
		float64(rss)/(1<<20), float64(s.cg.peak())/(1<<20), scalePodLimit>>20)
}

// forEach runs do(0..n-1) on workers goroutines and fails the test at the first error.
func forEach(t *testing.T, workers, n int, do func(int) error) {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}
