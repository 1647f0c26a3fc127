package fatfuse

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestReadaheadRaised: a mount made by root reads ahead as far as a READ request may reach
// (1 MiB), not the kernel's 128 KiB default for FUSE, so a sequential read is an eighth of the
// round trips.
func TestReadaheadRaised(t *testing.T) {
	needTools(t, "mkfs.fat")
	testenv.RequireRoot(t, "the read ahead of a mount's backing device in sysfs")
	img := makeImage(t, 16384, "-F", "16")
	m := mountImage(t, img, "")
	var st syscall.Stat_t
	if err := syscall.Stat(m.dir, &st); err != nil {
		t.Fatal(err)
	}
	knob := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	got, err := os.ReadFile(knob)
	if err != nil {
		t.Fatal(err)
	}
	if kb := strings.TrimSpace(string(got)); kb != "1024" {
		t.Errorf("%s: %s KiB, want 1024", knob, kb)
	}
}
