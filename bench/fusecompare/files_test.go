package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestWriteThenVerify(t *testing.T) {
	for _, size := range []int{0, 5, 4096, 1 << 20} {
		dir := filepath.Join(t.TempDir(), "set")
		var done atomic.Int64
		if err := writeFiles(dir, 7, size, &done); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		for i := 1; i <= 7; i++ {
			fi, err := os.Stat(fileName(dir, i))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() != int64(size) {
				t.Fatalf("%s: size %d, want %d", fileName(dir, i), fi.Size(), size)
			}
		}
		if err := verifyFiles(dir, 7, size); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if done.Load() != 7 {
			t.Fatalf("size %d: %d files counted as done, want 7", size, done.Load())
		}
	}
}

func TestWriteRefusesExistingDirectory(t *testing.T) {
	if err := writeFiles(t.TempDir(), 1, 1, new(atomic.Int64)); err == nil {
		t.Fatal("writeFiles into an existing directory succeeded; it must start from nothing")
	}
}

func TestVerifyCatchesDamage(t *testing.T) {
	const size = 4096
	setUp := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "set")
		if err := writeFiles(dir, 3, size, new(atomic.Int64)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("swapped files", func(t *testing.T) {
		dir := setUp(t)
		a, b := fileName(dir, 1), fileName(dir, 2)
		tmp := filepath.Join(dir, "tmp")
		for _, mv := range [][2]string{{a, tmp}, {b, a}, {tmp, b}} {
			if err := os.Rename(mv[0], mv[1]); err != nil {
				t.Fatal(err)
			}
		}
		if err := verifyFiles(dir, 3, size); err == nil {
			t.Fatal("verify accepted two files with each other's content")
		}
	})
	t.Run("flipped byte", func(t *testing.T) {
		dir := setUp(t)
		f, err := os.OpenFile(fileName(dir, 3), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		if _, err := f.ReadAt(buf, size/2); err != nil {
			t.Fatal(err)
		}
		buf[0] ^= 0xff
		if _, err := f.WriteAt(buf, size/2); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := verifyFiles(dir, 3, size); err == nil {
			t.Fatal("verify accepted a file with a flipped byte")
		}
	})
	t.Run("missing file", func(t *testing.T) {
		dir := setUp(t)
		if err := os.Remove(fileName(dir, 2)); err != nil {
			t.Fatal(err)
		}
		if err := verifyFiles(dir, 3, size); err == nil {
			t.Fatal("verify accepted a set with a file missing")
		}
	})
	t.Run("short file", func(t *testing.T) {
		dir := setUp(t)
		if err := os.Truncate(fileName(dir, 1), size-1); err != nil {
			t.Fatal(err)
		}
		if err := verifyFiles(dir, 3, size); err == nil {
			t.Fatal("verify accepted a truncated file")
		}
	})
}

// TestStopReportsProgress runs the command as the benchmark does and cuts it short: the report
// must say how far it got, which is what fuse.sh turns into a partial rate.
func TestStopReportsProgress(t *testing.T) {
	if os.Getenv("FUSECOMPARE_CHILD") == "1" {
		os.Exit(run(os.Args[len(os.Args)-4:]))
	}
	dir := filepath.Join(t.TempDir(), "set")
	// Enough 1 MiB files that the run is still going when the signal comes.
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopReportsProgress$", "--", "write", dir, "100000", "1048576")
	cmd.Env = append(os.Environ(), "FUSECOMPARE_CHILD=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		// A fourth file exists only once the third is written and counted.
		if entries, _ := os.ReadDir(dir); len(entries) >= 4 || time.Now().After(deadline) {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 124 {
		t.Fatalf("exit %v, want status 124; stderr: %s", err, stderr.String())
	}
	m := regexp.MustCompile(`stopped after (\d+) of 100000 files`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no progress report on stderr: %q", stderr.String())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The report is a lower bound: files go on being written until the process is gone.
	if n, _ := strconv.Atoi(m[1]); n < 3 || n > len(entries) {
		t.Fatalf("reported %d files done, %d exist", n, len(entries))
	}
}
