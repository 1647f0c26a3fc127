package fatfuse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
)

// stateCopy copies the holder's state file into a new memfd, for a test to damage.
func stateCopy(t *testing.T, from *os.File, edit func([]byte) []byte) *os.File {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(from, 0, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.MemfdCreate("state-copy", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "state-copy")
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(edit(append([]byte(nil), b...))); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestStateFile: the state a real server leaves names the nodes and handles the kernel holds; a
// last record cut short is dropped; any other damage (every byte of the file flipped in turn, a
// cut header) is refused with an error, never a panic, and TakeOver says which connection.
func TestStateFile(t *testing.T) {
	needTools(t, "mkfs.fat")
	h := hold(t, makeImage(t, 32<<10, "-F", "16"))
	h.start("serve")
	if err := os.MkdirAll(filepath.Join(h.dir, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(h.dir, "a/b/file.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h.pause()

	st, err := loadState(h.state)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range st.nodes {
		names[c.name] = true
	}
	if !names["a"] || !names["b"] || !names["FILE.TXT"] && !names["file.txt"] || len(st.handles) == 0 || !st.paused {
		t.Fatalf("state holds nodes %v, %d handles, paused %v", names, len(st.handles), st.paused)
	}

	torn := stateCopy(t, h.state, func(b []byte) []byte {
		return append(b, 200, 0, 0, 0, ^byte(200), 255, 255, 255, 1, 2, 3, 4, recNode, 9, 9) // a record cut short
	})
	if got, err := loadState(torn); err != nil || len(got.nodes) != len(st.nodes) || len(got.handles) != len(st.handles) || !got.paused {
		t.Errorf("a last record cut short: %v; want it dropped and the state as before", err)
	}

	size, _ := h.state.Seek(0, io.SeekEnd)
	hdr := make([]byte, stateHeaderSize)
	h.state.ReadAt(hdr, 0)
	start := int64(binary.LittleEndian.Uint64(hdr[16:]))
	refused := 0
	for i := int64(0); i < size; i++ {
		if i >= stateHeaderSize && i < start {
			continue // between the header and the active log: not read
		}
		damaged := stateCopy(t, h.state, func(b []byte) []byte { b[i] ^= 0x41; return b })
		if _, err := loadState(damaged); err != nil {
			if !errors.Is(err, errBadState) {
				t.Errorf("byte %d flipped: %v, not errBadState", i, err)
			}
			refused++
		}
	}
	if want := size - (start - stateHeaderSize); int64(refused) != want {
		t.Errorf("%d of %d single-byte damages refused", refused, want)
	}
	if _, err := loadState(stateCopy(t, h.state, func(b []byte) []byte { return b[:20] })); !errors.Is(err, errBadState) {
		t.Errorf("a cut header: %v", err)
	}

	bad := stateCopy(t, h.state, func(b []byte) []byte { b[start+10] ^= 1; return b })
	_, err = TakeOver(nil, Connection{FD: -1, Mountpoint: h.dir, State: bad}, mountopt.Options{})
	if !errors.Is(err, errBadState) || !strings.Contains(err.Error(), h.dir) {
		t.Errorf("TakeOver with a damaged state: %v", err)
	}
	f.Close()
	h.start("takeover")
	h.unmount()
}

// TestStateCompaction: a state log that grew through many changes is compacted while the
// server runs (the log moves), and a server that takes over after a kill from it gives every
// file the kernel still holds the inode number and bytes it had, a directory renamed with
// thousands of nodes under it included.
func TestStateCompaction(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	h := hold(t, makeImage(t, 64<<10, "-F", "32"))
	h.start("serve")
	logStart := func() int64 {
		hdr := make([]byte, stateHeaderSize)
		if _, err := h.state.ReadAt(hdr, 0); err != nil {
			t.Fatal(err)
		}
		return int64(binary.LittleEndian.Uint64(hdr[16:]))
	}
	first, moved := logStart(), false
	const files = 4000
	if err := os.Mkdir(filepath.Join(h.dir, "many"), 0o755); err != nil {
		t.Fatal(err)
	}
	held := make([]*os.File, 0, 100)
	for i := range files {
		name := filepath.Join(h.dir, "many", fmt.Sprintf("file%05d", i))
		if err := os.WriteFile(name, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if logStart() != first {
			moved = true
		}
		if i%40 == 0 {
			f, err := os.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, f)
			defer f.Close()
		}
	}
	if err := os.Rename(filepath.Join(h.dir, "many"), filepath.Join(h.dir, "renamed")); err != nil {
		t.Fatal(err)
	}
	inos := map[string]uint64{}
	for i := range files {
		name := filepath.Join(h.dir, "renamed", fmt.Sprintf("file%05d", i))
		var st syscall.Stat_t
		if err := syscall.Stat(name, &st); err != nil {
			t.Fatal(err)
		}
		inos[name] = st.Ino
	}
	d, err := os.Open(filepath.Join(h.dir, "renamed"))
	if err != nil {
		t.Fatal(err)
	}
	d.Sync() // the rename and the files on the medium
	d.Close()
	if !moved {
		t.Fatalf("the state log never moved: not compacted")
	}
	h.kill()
	h.start("takeover")
	for name, ino := range inos {
		var st syscall.Stat_t
		if err := syscall.Stat(name, &st); err != nil || st.Ino != ino {
			t.Fatalf("%s: inode %d, %v; was %d", name, st.Ino, err, ino)
		}
	}
	for _, f := range held {
		b, err := io.ReadAll(f)
		if err != nil || !strings.HasSuffix(string(b), filepath.Base(f.Name())) {
			t.Fatalf("%s held open: %q, %v", f.Name(), b, err)
		}
		f.Close()
	}
	h.unmount()
	fsckClean(t, h.img)
}
