package fatfuse

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestStatfsFiles: statfs reports files as the driver's volume stats do (fatvol.Volume.Files):
// used = the files and directories on the volume, free = what the free clusters and the fixed
// root's free slots hold at two entries a file. df -i shows the same.
func TestStatfsFiles(t *testing.T) {
	needTools(t, "mkfs.fat", "df")
	img := makeImage(t, 16384, "-F", "16", "-r", "512")
	m := mountImage(t, img, "")
	for _, name := range []string{"a", "b", "c", "dir/d"} {
		if strings.HasPrefix(name, "dir/") {
			if err := os.Mkdir(m.path("dir"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(m.path(name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.dir, &st); err != nil {
		t.Fatal(err)
	}
	// Five entries: four in the root (a, b, c, dir) and d.
	const used, inRoot = 5, 4
	wantFree := st.Bfree*uint64(st.Bsize)/64 + (512-inRoot*2)/2
	if st.Files-st.Ffree != used || st.Ffree != wantFree {
		t.Errorf("statfs: %d files, %d free (%d used); want %d free, %d used", st.Files, st.Ffree, st.Files-st.Ffree, wantFree, used)
	}
	files, err := m.vol.Files()
	if err != nil {
		t.Fatal(err)
	}
	if uint64(files.Total) != st.Files || uint64(files.Free) != st.Ffree {
		t.Errorf("statfs says %d files, %d free; the driver's stats (Volume.Files) %+v", st.Files, st.Ffree, files)
	}
	out, err := exec.Command("df", "--output=itotal,iused,iavail", m.dir).CombinedOutput()
	if err != nil {
		t.Fatalf("df --output=itotal,iused,iavail: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) != 3 || f[0] != strconv.FormatUint(st.Files, 10) || f[1] != strconv.Itoa(used) || f[2] != strconv.FormatUint(wantFree, 10) {
		t.Errorf("df -i: %q; want %d inodes, %d used, %d free", lines[len(lines)-1], st.Files, used, wantFree)
	}
}
