package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// fileName is the name of the i-th file of a set. It needs a long name entry on FAT (it is not
// 8.3), as most real names do.
func fileName(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("file-%05d.dat", i))
}

// payload is what the i-th file of a set holds: one pseudo-random block shared by all files
// (generating fresh random bytes per file would cost more CPU than the file system under test),
// with the index stamped at both ends so that a file written in another file's place is caught.
type payload struct {
	block []byte
}

func newPayload(size int) payload {
	block := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= size; i += 8 {
		binary.LittleEndian.PutUint64(block[i:], rng.Uint64())
	}
	return payload{block: block}
}

// forFile returns the content of file i; the slice is only valid until the next call.
func (p payload) forFile(i int) []byte {
	var stamp [8]byte
	binary.LittleEndian.PutUint64(stamp[:], uint64(i))
	copy(p.block, stamp[:])
	if len(p.block) >= 16 {
		copy(p.block[len(p.block)-8:], stamp[:])
	}
	return p.block
}

// writeFiles creates dir and count files of size bytes in it, each with one write(2), then
// syncs the file system that holds dir (syncfs), so the time includes getting them to disk.
// done counts the files written so far, for a report when the run is cut short.
func writeFiles(dir string, count, size int, done *atomic.Int64) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("make directory: %w", err)
	}
	p := newPayload(size)
	for i := 1; i <= count; i++ {
		name := fileName(dir, i)
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		_, err = f.Write(p.forFile(i))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		done.Add(1)
	}
	return syncFileSystem(dir)
}

func syncFileSystem(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open for syncfs: %w", err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}

// fsyncFile makes a file durable, such as the image under a FUSE server whose own fsync does
// not reach the disk.
func fsyncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("open for fsync: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// verifyFiles checks that dir holds exactly the count files writeFiles made, with their content.
func verifyFiles(dir string, count, size int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if len(entries) != count {
		return fmt.Errorf("%s: %d entries, want %d", dir, len(entries), count)
	}
	p := newPayload(size)
	for i := 1; i <= count; i++ {
		name := fileName(dir, i)
		got, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if !bytes.Equal(got, p.forFile(i)) {
			return fmt.Errorf("%s: content differs from what was written (%d bytes, want %d)", name, len(got), size)
		}
	}
	return nil
}
