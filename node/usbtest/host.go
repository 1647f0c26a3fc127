package usbtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// NewHost makes an empty fake tree under dir, which must not exist yet, for a tree that outlives
// one test: end-to-end tests hand it to a driver running in a pod. Close detaches the sticks'
// loop devices and removes dir.
func NewHost(dir string) (*Fake, error) {
	if _, err := os.Lstat(dir); err == nil {
		return nil, fmt.Errorf("fake sysfs tree %s: already exists", dir)
	}
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
			return nil, fmt.Errorf("fake sysfs tree: %w", err)
		}
	}
	return f, nil
}

// Attach is Add without a test: it attaches a sparse file of size bytes to a loop device and
// describes it as a removable USB disk. The loop device stays attached until Close.
func (f *Fake) Attach(size int64, vendor, model, serial string) (*Stick, error) {
	f.n++
	img := filepath.Join(f.dir, "images", fmt.Sprintf("stick%d.img", f.n))
	file, err := os.Create(img)
	if err == nil {
		err = file.Truncate(size)
		if cerr := file.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stick image %s: %w", img, err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("losetup %s: %w: %s", img, err, out)
	}
	loop := strings.TrimSpace(string(out))
	s := f.newStick(loop, size, vendor, model, serial)
	if err := f.describe(s); err != nil {
		return nil, errors.Join(err, detach(loop))
	}
	f.Sticks = append(f.Sticks, s)
	return s, nil
}

// newStick names a stick on an attached loop device; f.n is its port on the fake USB bus, and its
// by-path name says so as udev's does (pci-<controller>-usb-0:<port>:1.0-scsi-0:0:0:0).
func (f *Fake) newStick(loop string, size int64, vendor, model, serial string) *Stick {
	kernel := filepath.Base(loop)
	byID := fmt.Sprintf("usb-%s_%s_%s-0:0", vendor, model, serial)
	byPath := fmt.Sprintf("pci-0000:00:14.0-usb-0:%d:1.0-scsi-0:0:0:0", f.n)
	return &Stick{Loop: loop, Kernel: kernel, Serial: serial, ByID: byID, Size: size,
		SysDir: filepath.Join(f.SysfsRoot, "block", kernel), ByIDLink: filepath.Join(f.ByIDDir, byID),
		ByPath: byPath, ByPathLink: filepath.Join(f.ByPathDir, byPath),
		vendor: vendor, model: model, port: f.n}
}

// describe writes the sysfs entries and by-id link of a stick on an attached loop device: the
// layout of a real stick, whose block device's "device" link leads to the SCSI device, which
// sits below the USB interface and the USB device that carries the serial.
func (f *Fake) describe(s *Stick) error {
	devNum, err := os.ReadFile(filepath.Join("/sys/block", s.Kernel, "dev"))
	if err != nil {
		return fmt.Errorf("stick %s: %w", s.Loop, err)
	}
	usbDev := filepath.Join(f.SysfsRoot, "devices", "pci0000:00", "0000:00:14.0", "usb1", fmt.Sprintf("1-%d", s.port))
	scsiDev := filepath.Join(usbDev, fmt.Sprintf("1-%d:1.0", s.port), "host0", "target0:0:0", "0:0:0:0")
	files := map[string]string{
		filepath.Join(usbDev, "idVendor"):    "0781",
		filepath.Join(usbDev, "serial"):      s.Serial,
		filepath.Join(scsiDev, "vendor"):     fmt.Sprintf("%-8s", s.vendor),
		filepath.Join(scsiDev, "model"):      fmt.Sprintf("%-16s", s.model),
		filepath.Join(s.SysDir, "removable"): "1",
		filepath.Join(s.SysDir, "size"):      fmt.Sprint(s.Size / 512),
		filepath.Join(s.SysDir, "dev"):       strings.TrimSpace(string(devNum)),
	}
	if s.disk {
		// A fixed disk on a SATA port: the "device" link leads to the SCSI device below the ATA
		// port, and the disk is not removable.
		scsiDev = filepath.Join(f.SysfsRoot, "devices", "pci0000:00", "0000:00:1f.2", fmt.Sprintf("ata%d", s.port),
			fmt.Sprintf("host%d", s.port), fmt.Sprintf("target%d:0:0", s.port), fmt.Sprintf("%d:0:0:0", s.port))
		files = map[string]string{
			filepath.Join(scsiDev, "vendor"):     fmt.Sprintf("%-8s", s.vendor),
			filepath.Join(scsiDev, "model"):      fmt.Sprintf("%-16s", s.model),
			filepath.Join(s.SysDir, "removable"): "0",
			filepath.Join(s.SysDir, "size"):      fmt.Sprint(s.Size / 512),
			filepath.Join(s.SysDir, "dev"):       strings.TrimSpace(string(devNum)),
		}
	}
	if s.card {
		// An SD card: the block device's "device" link leads to the card on its MMC host.
		scsiDev = filepath.Join(f.SysfsRoot, "devices", "platform", "fe320000.mmc", "mmc_host", "mmc1", fmt.Sprintf("mmc1:%04x", s.port))
		files = map[string]string{
			filepath.Join(scsiDev, "name"):       s.model,
			filepath.Join(scsiDev, "serial"):     s.Serial,
			filepath.Join(scsiDev, "manfid"):     "0x000003",
			filepath.Join(scsiDev, "type"):       "SD",
			filepath.Join(s.SysDir, "removable"): "1",
			filepath.Join(s.SysDir, "size"):      fmt.Sprint(s.Size / 512),
			filepath.Join(s.SysDir, "dev"):       strings.TrimSpace(string(devNum)),
		}
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("stick %s: %w", s.Loop, err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			return fmt.Errorf("stick %s: %w", s.Loop, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(s.SysDir, "holders"), 0o755); err != nil {
		return fmt.Errorf("stick %s: %w", s.Loop, err)
	}
	if err := os.Symlink(scsiDev, filepath.Join(s.SysDir, "device")); err != nil {
		return fmt.Errorf("stick %s: %w", s.Loop, err)
	}
	for _, link := range []string{s.ByIDLink, s.ByPathLink} {
		if err := os.Symlink(s.Loop, link); err != nil {
			return fmt.Errorf("stick %s: %w", s.Loop, err)
		}
	}
	return nil
}

// BackingFile is the file behind a stick's loop device, as the kernel reports it: the host's
// view of the stick's bytes.
func BackingFile(s *Stick) (string, error) {
	b, err := os.ReadFile(filepath.Join("/sys/block", s.Kernel, "loop", "backing_file"))
	if err != nil {
		return "", fmt.Errorf("stick %s: %w", s.Loop, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Detach unplugs one stick of a tree made by NewHost, detaches its loop device and removes its
// image: a stick a test added for itself goes at its end, while the tree's others stay.
func (f *Fake) Detach(s *Stick) error {
	var errs []error
	for _, p := range []string{s.SysDir, s.ByIDLink, s.ByPathLink} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("stick %s: %w", s.Loop, err))
		}
	}
	back, err := BackingFile(s)
	errs = append(errs, err, detach(s.Loop))
	if err == nil {
		errs = append(errs, os.Remove(back))
	}
	f.Sticks = slices.DeleteFunc(f.Sticks, func(o *Stick) bool { return o == s })
	return errors.Join(errs...)
}

// Close detaches the loop devices of a tree made by NewHost and removes its directory.
func (f *Fake) Close() error {
	var errs []error
	for _, s := range f.Sticks {
		errs = append(errs, detach(s.Loop))
	}
	f.Sticks = nil
	if err := os.RemoveAll(f.dir); err != nil {
		errs = append(errs, fmt.Errorf("fake sysfs tree: %w", err))
	}
	return errors.Join(errs...)
}

func detach(loop string) error {
	if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
		return fmt.Errorf("losetup -d %s: %w: %s", loop, err, out)
	}
	return nil
}
