// Package usbtest stands in loop devices for removable media: it attaches sparse files to loop
// devices and builds a sysfs tree and by-id and by-path directories under a temporary directory
// that describe them as removable USB disks, SD cards or fixed SATA disks, for tests of the
// removable-media pool. It needs root.
package usbtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Stick is one stand-in USB stick.
type Stick struct {
	Loop   string // /dev/loopN
	Kernel string // loopN
	Serial string
	ByID   string // by-id name
	Size   int64
	// SysDir is its /sys/block entry in the fake tree; removing it unplugs the stick.
	SysDir string
	// ByIDLink is its by-id symlink.
	ByIDLink string
	// ByPath is its by-path name (the port it is plugged into), ByPathLink the symlink.
	ByPath, ByPathLink string

	vendor, model string
	port          int  // its port on the fake USB bus, or its slot on the MMC host
	card          bool // an SD card on an MMC host rather than a USB stick
	disk          bool // a fixed SATA disk: not removable, not on USB
}

// Fake is a fake sysfs root and by-id directory with sticks in it.
type Fake struct {
	SysfsRoot string
	ByIDDir   string
	ByPathDir string
	DevDir    string
	Glob      string
	Sticks    []*Stick
	dir       string
	n         int
}

// Available tells why loop devices cannot be used here, or "".
func Available() string {
	if os.Geteuid() != 0 {
		return "needs root for loop devices"
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		return "needs losetup"
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return "needs /dev/loop-control"
	}
	return ""
}

// New makes an empty fake tree under a test temporary directory.
func New(t testing.TB) *Fake {
	t.Helper()
	dir := t.TempDir()
	f := &Fake{
		SysfsRoot: filepath.Join(dir, "sys"),
		ByIDDir:   filepath.Join(dir, "by-id"),
		ByPathDir: filepath.Join(dir, "by-path"),
		DevDir:    "/dev",
		Glob:      "loop*",
		dir:       dir,
	}
	for _, d := range []string{filepath.Join(f.SysfsRoot, "block"), f.ByIDDir, f.ByPathDir, filepath.Join(dir, "images")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// Add attaches a sparse file of size bytes to a loop device and describes it as a removable
// USB disk with the given vendor, model and serial. The loop device is detached at cleanup.
func (f *Fake) Add(t testing.TB, size int64, vendor, model, serial string) *Stick {
	t.Helper()
	return f.add(t, size, vendor, model, serial, kindStick)
}

// AddCard is Add for an SD card in a built-in reader: a removable disk on an MMC host, with the
// card's product name and serial (sysfs's name and serial) and a by-id name mmc-<name>_<serial>.
func (f *Fake) AddCard(t testing.TB, size int64, name, serial string) *Stick {
	t.Helper()
	return f.add(t, size, "", name, serial, kindCard)
}

// AddDisk is Add for a fixed disk on a SATA port (sysfs's removable 0, on no USB bus), by-id
// ata-<model>_<serial> and by-path pci-0000:00:1f.2-ata-<port>: a member of the pool only when an
// include pattern names it.
func (f *Fake) AddDisk(t testing.TB, size int64, model, serial string) *Stick {
	t.Helper()
	return f.add(t, size, "ATA", model, serial, kindDisk)
}

// What a stand-in is.
const (
	kindStick = iota
	kindCard
	kindDisk
)

func (f *Fake) add(t testing.TB, size int64, vendor, model, serial string, kind int) *Stick {
	t.Helper()
	f.n++
	img := filepath.Join(f.dir, "images", fmt.Sprintf("stick%d.img", f.n))
	file, err := os.Create(img)
	if err == nil {
		err = file.Truncate(size)
		file.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", img, err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", loop, err, out)
		}
	})
	s := f.newStick(loop, size, vendor, model, serial)
	switch kind {
	case kindCard:
		s.card = true
		s.ByID = fmt.Sprintf("mmc-%s_%s", model, serial)
		s.ByPath = fmt.Sprintf("platform-fe32%04x.mmc", s.port)
	case kindDisk:
		s.disk = true
		s.ByID = fmt.Sprintf("ata-%s_%s", model, serial)
		s.ByPath = fmt.Sprintf("pci-0000:00:1f.2-ata-%d", s.port)
	}
	s.ByIDLink, s.ByPathLink = filepath.Join(f.ByIDDir, s.ByID), filepath.Join(f.ByPathDir, s.ByPath)
	if err := f.describe(s); err != nil {
		t.Fatal(err)
	}
	f.Sticks = append(f.Sticks, s)
	return s
}

// Unplug removes a stick from the fake tree, as the kernel does when it is pulled out. The
// loop device stays attached until cleanup.
func (f *Fake) Unplug(t testing.TB, s *Stick) {
	t.Helper()
	if err := os.RemoveAll(s.SysDir); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{s.ByIDLink, s.ByPathLink} {
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
	}
}

// Pull unplugs a stick and makes its loop device fail as a removed disk does: its capacity drops
// to zero, so writes fail (ENOSPC) and reads find nothing (EOF), while whoever has it open keeps
// the descriptor. The backing file is left as it was, so Replug brings back what reached it.
func (f *Fake) Pull(t testing.TB, s *Stick) {
	t.Helper()
	f.Unplug(t, s)
	setLoopOffset(t, s, s.Size)
}

// Replug undoes Pull: the loop device has its capacity again and the stick is back in the tree
// under the same names.
func (f *Fake) Replug(t testing.TB, s *Stick) {
	t.Helper()
	setLoopOffset(t, s, 0)
	if err := f.describe(s); err != nil {
		t.Fatal(err)
	}
}

// setLoopOffset moves the start of the loop device's window into its backing file; at the
// file's end the device is empty. The kernel writes back and drops the device's cached pages
// as it changes.
func setLoopOffset(t testing.TB, s *Stick, off int64) {
	t.Helper()
	dev, err := os.Open(s.Loop)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	info, err := unix.IoctlLoopGetStatus64(int(dev.Fd()))
	if err != nil {
		t.Fatalf("LOOP_GET_STATUS64 %s: %v", s.Loop, err)
	}
	info.Offset = uint64(off)
	if err := unix.IoctlLoopSetStatus64(int(dev.Fd()), info); err != nil {
		t.Fatalf("LOOP_SET_STATUS64 %s offset %d: %v", s.Loop, off, err)
	}
}
