package fatfuse

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestNodeBudget: past its node budget the server has the kernel forget the files it has not
// used lately, and its nodes come back under the budget; every file is still there with its
// inode number and content when looked up again; a file held open stays usable throughout, also
// across a rename; the directory lists every file; fsck.fat finds the volume clean.
func TestNodeBudget(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	m := mountImage(t, makeImage(t, 32<<10, "-F", "16"), "")
	const budget, files = 300, 2000
	m.srv.SetNodeBudget(budget)

	if err := os.Mkdir(m.path("many"), 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := os.Create(m.path("many/held.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.WriteString("before"); err != nil {
		t.Fatal(err)
	}
	inos := map[string]uint64{}
	for i := 0; i < files; i++ {
		name := m.path(fmt.Sprintf("many/f%04d", i))
		if err := os.WriteFile(name, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(name, &st); err != nil {
			t.Fatal(err)
		}
		inos[name] = st.Ino
	}
	settled := func() int {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := m.srv.Nodes()
			if n <= budget || time.Now().After(deadline) {
				return n
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if n := settled(); n > budget {
		t.Fatalf("%d nodes after making %d files, with a budget of %d", n, files, budget)
	}

	// Every file again: the same inode, the same bytes; the nodes come back under the budget.
	for name, ino := range inos {
		var st syscall.Stat_t
		if err := syscall.Stat(name, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino != ino {
			t.Fatalf("%s: inode %d, was %d", name, st.Ino, ino)
		}
		if b, err := os.ReadFile(name); err != nil || string(b) != name {
			t.Fatalf("%s: %q, %v", name, b, err)
		}
	}
	if n := settled(); n > budget {
		t.Fatalf("%d nodes after reading %d files back, with a budget of %d", n, files, budget)
	}

	// The open file went through it all, and is renamed while open.
	if err := os.Rename(m.path("many/held.txt"), m.path("held-renamed.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := held.WriteString(", after"); err != nil {
		t.Fatal(err)
	}
	if err := held.Sync(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(m.path("held-renamed.txt")); err != nil || !bytes.Equal(b, []byte("before, after")) {
		t.Fatalf("the file held open: %q, %v", b, err)
	}
	if entries, err := os.ReadDir(m.path("many")); err != nil || len(entries) != files {
		t.Fatalf("many/ lists %d entries, %v; want %d", len(entries), err, files)
	}
	held.Close()
	m.unmount()
	fsckClean(t, m.img)
}
