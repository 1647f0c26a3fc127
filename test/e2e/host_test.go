package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/csi-fat/csi-fat/internal/mountinfo"
)

// hostMounts lists the host's mounts (the test runs in the host's mount namespace).
func hostMounts() ([]mountinfo.Mount, error) { return mountinfo.Read("/proc/self/mountinfo") }

// mounted tells whether something is mounted at path.
func mounted(path string) bool {
	mounts, err := hostMounts()
	if err != nil {
		return false
	}
	path = filepath.Clean(path)
	for _, m := range mounts {
		if m.MountPoint == path {
			return true
		}
	}
	return false
}

// mountsOf lists the host's mount points whose source is device: a FUSE mount of the driver
// names the image file or device it serves, and bind mounts of it keep that source.
func mountsOf(device string) ([]string, error) {
	mounts, err := hostMounts()
	if err != nil {
		return nil, err
	}
	var points []string
	for _, m := range mounts {
		if m.Source == device {
			points = append(points, m.MountPoint)
		}
	}
	return points, nil
}

// detachLoopsUnder detaches every loop device whose backing file lies under dir (what an
// interrupted run left).
func detachLoopsUnder(dir string) error {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		back := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if !strings.HasPrefix(back, filepath.Clean(dir)+"/") {
			continue
		}
		loop := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup -d %s (backed by %s): %w: %s", loop, back, err, out))
		}
	}
	return errors.Join(errs...)
}

// imageFile is the pool file of an image volume, from its volume handle <pool>:<node>:<name>.
func (e *environment) imageFile(handle string) (string, error) {
	pool, rest, _ := strings.Cut(handle, ":")
	nodeID, name, ok := strings.Cut(rest, ":")
	if pool != "image" || !ok || nodeID != e.node {
		return "", fmt.Errorf("volume handle %q: not an image volume of node %s", handle, e.node)
	}
	return filepath.Join(e.poolDir, name+".img"), nil
}

// mtoolsFiles lists the files and directories of a FAT image as mtools sees them, by path
// ("dir/" for a directory), recursively.
func mtoolsFiles(img string) ([]string, error) {
	out, err := exec.Command("mdir", "-/", "-b", "-i", img, "::").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("mdir -/ -b -i %s: %w: %s", img, err, out)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimPrefix(l, "::/"); l != "" {
			names = append(names, l)
		}
	}
	return names, nil
}

// mtoolsRead returns a file's bytes from a FAT image as mtools reads them.
func mtoolsRead(img, name string) ([]byte, error) {
	cmd := exec.Command("mtype", "-i", img, "::/"+name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("mtype -i %s ::/%s: %w: %s", img, name, err, stderr.String())
	}
	return out, nil
}

// fatGeometry is what mtools' minfo reads from a FAT boot sector.
type fatGeometry struct {
	clusterBytes int64
	rootEntries  int64 // slots of a FAT12/16 fixed root; 0 for FAT32
	dataClusters int64
	serial       string // the volume serial number: a new one with every format
}

// minfoGeometry reads a FAT image's cluster size and fixed root with minfo.
func minfoGeometry(img string) (fatGeometry, error) {
	out, err := exec.Command("minfo", "-i", img, "::").CombinedOutput()
	if err != nil {
		return fatGeometry{}, fmt.Errorf("minfo -i %s: %w: %s", img, err, out)
	}
	field := func(name string) (int64, error) {
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, name); ok && (strings.HasPrefix(v, ": ") || strings.HasPrefix(v, "=")) {
				v = strings.TrimLeft(v, ":= ")
				return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
		return 0, fmt.Errorf("minfo -i %s: no %q", img, name)
	}
	sector, err1 := field("sector size")
	perCluster, err2 := field("cluster size")
	root, err3 := field("max available root directory slots")
	reserved, err4 := field("reserved (boot) sectors")
	fats, err5 := field("fats")
	perFAT, err6 := field("sectors per fat")
	small, err7 := field("small size")
	big, err8 := field("big size")
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8); err != nil {
		return fatGeometry{}, err
	}
	if perFAT == 0 { // FAT32 keeps it elsewhere
		if perFAT, err = field("Big fatlen"); err != nil {
			return fatGeometry{}, err
		}
	}
	total := max(small, big)
	rootSectors := (root*32 + sector - 1) / sector
	g := fatGeometry{
		clusterBytes: sector * perCluster,
		rootEntries:  root,
		dataClusters: (total - reserved - fats*perFAT - rootSectors) / perCluster,
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "serial number: "); ok {
			g.serial = strings.TrimSpace(v)
		}
	}
	if g.serial == "" {
		return fatGeometry{}, fmt.Errorf("minfo -i %s: no serial number", img)
	}
	return g, nil
}
