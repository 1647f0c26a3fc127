package usbtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
		DevDir:    "/dev",
		Glob:      "loop*",
		dir:       dir,
	}
	for _, d := range []string{filepath.Join(f.SysfsRoot, "block"), f.ByIDDir, filepath.Join(dir, "images")} {
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
	s, err := f.describe(loop, size, vendor, model, serial)
	if err != nil {
		return nil, errors.Join(err, detach(loop))
	}
	f.Sticks = append(f.Sticks, s)
	return s, nil
}

// describe writes the sysfs entries and by-id link of a stick on an attached loop device: the
// layout of a real stick, whose block device's "device" link leads to the SCSI device, which
// sits below the USB interface and the USB device that carries the serial.
func (f *Fake) describe(loop string, size int64, vendor, model, serial string) (*Stick, error) {
	kernel := filepath.Base(loop)
	devNum, err := os.ReadFile(filepath.Join("/sys/block", kernel, "dev"))
	if err != nil {
		return nil, fmt.Errorf("stick %s: %w", loop, err)
	}
	usbDev := filepath.Join(f.SysfsRoot, "devices", "pci0000:00", "0000:00:14.0", "usb1", fmt.Sprintf("1-%d", f.n))
	scsiDev := filepath.Join(usbDev, fmt.Sprintf("1-%d:1.0", f.n), "host0", "target0:0:0", "0:0:0:0")
	sysDir := filepath.Join(f.SysfsRoot, "block", kernel)
	byID := fmt.Sprintf("usb-%s_%s_%s-0:0", vendor, model, serial)
	files := map[string]string{
		filepath.Join(usbDev, "idVendor"):  "0781",
		filepath.Join(usbDev, "serial"):    serial,
		filepath.Join(scsiDev, "vendor"):   fmt.Sprintf("%-8s", vendor),
		filepath.Join(scsiDev, "model"):    fmt.Sprintf("%-16s", model),
		filepath.Join(sysDir, "removable"): "1",
		filepath.Join(sysDir, "size"):      fmt.Sprint(size / 512),
		filepath.Join(sysDir, "dev"):       strings.TrimSpace(string(devNum)),
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("stick %s: %w", loop, err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("stick %s: %w", loop, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(sysDir, "holders"), 0o755); err != nil {
		return nil, fmt.Errorf("stick %s: %w", loop, err)
	}
	if err := os.Symlink(scsiDev, filepath.Join(sysDir, "device")); err != nil {
		return nil, fmt.Errorf("stick %s: %w", loop, err)
	}
	link := filepath.Join(f.ByIDDir, byID)
	if err := os.Symlink(loop, link); err != nil {
		return nil, fmt.Errorf("stick %s: %w", loop, err)
	}
	return &Stick{Loop: loop, Kernel: kernel, Serial: serial, ByID: byID, Size: size, SysDir: sysDir, ByIDLink: link}, nil
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
