package mountinfo

import (
	"os"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	table := `22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
36 35 0:42 / /mnt/with\040space rw,nosuid,nodev shared:1 master:2 - fuse.fat /img\040a.img rw,user_id=0
short line
37 35 7:0 / /media/stick rw - vfat /dev/loop0 rw
`
	ms, err := Parse(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{"0:21", "/proc", "proc", "proc"},
		{"0:42", "/mnt/with space", "fuse.fat", "/img a.img"},
		{"7:0", "/media/stick", "vfat", "/dev/loop0"},
	}
	if len(ms) != len(want) {
		t.Fatalf("%d mounts, want %d: %+v", len(ms), len(want), ms)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("mount %d = %+v, want %+v", i, ms[i], want[i])
		}
	}
	for in, out := range map[string]string{`a\040b`: "a b", `tab\011`: "tab\t", `back\134slash`: `back\slash`, `odd\04`: `odd\04`, `x\999`: `x\999`} {
		if got := Unescape(in); got != out {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, out)
		}
	}
}

// TestReadSelf: this process's own table holds its root.
func TestReadSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Skip("no /proc here")
	}
	ms, err := Read("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.MountPoint == "/" {
			return
		}
	}
	t.Fatalf("no mount at / in %d mounts", len(ms))
}
