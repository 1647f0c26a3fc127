package fatfuse

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"
)

// TestWalkHeap: under a node budget, what the server keeps after a walk follows the nodes the
// kernel holds, not the files walked. 90,000 files are walked (stat, read) in two steps, to
// 30,000 and on to 90,000, each followed by the kernel forgetting every node; the live heap after
// GC must then be back within walkHeapMargin of what it was before the walk. The engine reads
// every directory and file first, so that its own memory (a directory once read stays, and the
// clusters of the files it opened are recorded) is in the baseline. Without copying the node
// tables afresh (tidyLocked) they kept the room of the most nodes they ever held, and more with
// every node made and forgotten.
func TestWalkHeap(t *testing.T) {
	needTools(t, "mkfs.fat")
	const dirs, perDir, budget = 450, 200, 20000
	img := makeImage(t, 256<<10, "-F", "32", "-s", "1")
	vol, err := fatvol.OpenImage(img, fatvol.Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 200)
	for d := 0; d < dirs; d++ {
		if err := vol.Mkdir(fmt.Sprintf("d%03d", d)); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < perDir; i++ {
			f, err := vol.Create(fmt.Sprintf("d%03d/file-%05d.txt", d, i))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(data); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := vol.Close(); err != nil {
		t.Fatal(err)
	}

	m := mountImage(t, img, "")
	buf := make([]byte, 4096)
	for d := 0; d < dirs; d++ {
		dn := fmt.Sprintf("d%03d", d)
		list, err := m.vol.ReadDir(dn)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list {
			f, err := m.vol.OpenFile(dn+"/"+e.Name(), os.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Read(buf)
			f.Close()
		}
	}
	m.srv.SetNodeBudget(budget)

	// forgetAll has the kernel forget every node it can (nothing is open), files before their
	// directories, and waits for its FORGETs.
	forgetAll := func() int {
		t.Helper()
		n := m.srv.Nodes()
		for round := 0; round < 100 && n > 1; round++ {
			m.srv.mu.Lock()
			var inos []uint64
			for ino, c := range m.srv.byIno {
				if c != m.srv.root {
					inos = append(inos, ino)
				}
			}
			m.srv.mu.Unlock()
			for len(inos) > 0 {
				batch := inos[:min(len(inos), pruneBatch)]
				inos = inos[len(batch):]
				m.srv.fuse.PruneNotify(batch)
			}
			time.Sleep(50 * time.Millisecond)
			n = m.srv.Nodes()
		}
		return n
	}
	// heap is the least of a few readings of the live heap after GC: a request still in hand
	// holds go-fuse's read buffer of a MiB for a moment, which is not what the server keeps.
	heap := func() int64 {
		least := int64(-1)
		for range 5 {
			runtime.GC()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if least < 0 || int64(ms.HeapAlloc) < least {
				least = int64(ms.HeapAlloc)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return least
	}
	walk := func(from, to int) {
		t.Helper()
		for d := from; d < to; d++ {
			dn := m.path(fmt.Sprintf("d%03d", d))
			list, err := os.ReadDir(dn)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range list {
				p := filepath.Join(dn, e.Name())
				if _, err := os.Stat(p); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(p)
				if err != nil || len(b) != len(data) {
					t.Fatalf("%s: %d bytes, %v", p, len(b), err)
				}
			}
		}
	}

	// A first walk of a few directories brings go-fuse's request readers, each with its buffer of
	// a MiB, to what they hold through the rest.
	walk(0, 10)
	if n := forgetAll(); n > 1 {
		t.Fatalf("%d nodes left before the walk", n)
	}
	base := heap()
	// Measured over six runs: 8-370 KiB above the base with the copy; without it (four runs)
	// 1.4-1.8 MiB after 30,000 files and 2.4-2.7 MiB after 90,000.
	const walkHeapMargin = 1 << 20
	for _, step := range []struct{ from, to int }{{10, dirs / 3}, {dirs / 3, dirs}} {
		walk(step.from, step.to)
		held, nodes := heap(), m.srv.Nodes()
		if n := forgetAll(); n > 1 {
			t.Fatalf("%d nodes left after the kernel was asked to forget them all", n)
		}
		after := heap()
		t.Logf("%d files walked: live heap %+d KiB holding %d nodes, %+d KiB once forgotten",
			step.to*perDir, (held-base)>>10, nodes, (after-base)>>10)
		if after-base > walkHeapMargin {
			t.Errorf("%d files walked: once every node is forgotten the live heap stays %d KiB above what it was before the walk; at most %d KiB",
				step.to*perDir, (after-base)>>10, walkHeapMargin>>10)
		}
	}
}
