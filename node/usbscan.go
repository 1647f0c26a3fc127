package node

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// USBConfig says where to look for USB devices and which may be used. The defaults are the real
// system's places; tests point them at a tree of their own whose devices are loop devices.
type USBConfig struct {
	SysfsRoot  string // "/sys": block devices are <SysfsRoot>/block/<name>
	DeviceGlob string // "sd*,mmcblk*": which names under <SysfsRoot>/block are candidates (comma-separated globs)
	DevDir     string // "/dev": where <name>'s device node is
	ByIDDir    string // "/dev/disk/by-id": stable names of devices
	MountInfo  string // "/proc/self/mountinfo": devices mounted by the host are never claimed

	// Allow and deny lists, each a list of shell patterns (path.Match). A device is usable when
	// it matches no deny pattern and, if any allow pattern is given, at least one allow pattern.
	AllowVendors, DenyVendors []string
	AllowModels, DenyModels   []string
	AllowSerials, DenySerials []string
	AllowByID, DenyByID       []string // matched against the names in ByIDDir
}

// DefaultUSBConfig is the real system's layout with no allow or deny lists.
func DefaultUSBConfig() USBConfig {
	return USBConfig{
		SysfsRoot:  "/sys",
		DeviceGlob: "sd*,mmcblk*",
		DevDir:     "/dev",
		ByIDDir:    "/dev/disk/by-id",
		MountInfo:  "/proc/self/mountinfo",
	}
}

// usbDevice is a whole removable block device on a USB bus.
type usbDevice struct {
	// ID is the device's stable identity: its by-id name (usb-<vendor>_<model>_<serial>-0:0 as
	// udev makes it) when there is one, else one built the same way from sysfs. It survives
	// re-plugging, unlike the kernel name.
	ID     string
	Kernel string // sdb: for messages only
	Path   string // /dev/sdb, valid until the device goes away
	Size   int64
	Vendor string
	Model  string
	Serial string
	ByID   []string
	// Busy says why the host is using the device (mounted, held by device-mapper), or "".
	Busy string
}

// scanUSB lists the USB devices present, filters applied or not. Devices that cannot be
// identified stably (no serial and no by-id name) are left out: a volume must find its device
// again after a re-plug.
func (c *USBConfig) scanUSB(filtered bool) ([]usbDevice, error) {
	var names []string
	for _, glob := range strings.Split(c.DeviceGlob, ",") {
		found, err := filepath.Glob(filepath.Join(c.SysfsRoot, "block", glob))
		if err != nil {
			return nil, fmt.Errorf("usb pool: device glob %q: %w", glob, err)
		}
		names = append(names, found...)
	}
	byID := c.readByID()
	mounted := c.mountedDevices()
	var out []usbDevice
	for _, sys := range names {
		d, ok := c.probe(sys, byID, mounted)
		if !ok || (filtered && !c.allowed(&d)) {
			continue
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Size != out[j].Size {
			return out[i].Size < out[j].Size
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// findUSB finds a device by its stable ID, whatever the filters say now: a volume already made
// on it keeps working.
func (c *USBConfig) findUSB(id string) (usbDevice, error) {
	devs, err := c.scanUSB(false)
	if err != nil {
		return usbDevice{}, err
	}
	for _, d := range devs {
		if d.ID == id {
			return d, nil
		}
	}
	return usbDevice{}, fmt.Errorf("usb device %s is not attached: %w", id, os.ErrNotExist)
}

// probe reads one /sys/block entry; ok is false for what is not a removable USB disk.
func (c *USBConfig) probe(sys string, byID map[string][]string, mounted map[string]bool) (usbDevice, bool) {
	kernel := filepath.Base(sys)
	if readAttr(sys, "removable") != "1" {
		return usbDevice{}, false
	}
	dev, err := filepath.EvalSymlinks(filepath.Join(sys, "device"))
	mmc := err == nil && onMMCBus(dev)
	if err != nil || !(onUSBBus(dev) || mmc) {
		return usbDevice{}, false
	}
	sectors, err := strconv.ParseInt(readAttr(sys, "size"), 10, 64)
	if err != nil || sectors <= 0 {
		return usbDevice{}, false // no medium in a card reader, or unreadable
	}
	d := usbDevice{
		Kernel: kernel,
		Path:   filepath.Join(c.DevDir, kernel),
		Size:   sectors * 512, // sysfs counts 512-byte sectors whatever the device's block size
		Vendor: readAttr(dev, "vendor"),
		Model:  readAttr(dev, "model"),
		Serial: usbSerial(dev),
	}
	if mmc {
		d.Vendor, d.Model, d.Serial = mmcIdentity(dev)
	}
	if real, err := filepath.EvalSymlinks(d.Path); err == nil {
		d.ByID = byID[real]
	}
	for _, id := range d.ByID {
		if strings.HasPrefix(id, "usb-") || strings.HasPrefix(id, "mmc-") {
			d.ID = id
			break
		}
	}
	if d.ID == "" && len(d.ByID) > 0 {
		d.ID = d.ByID[0]
	}
	if d.ID == "" {
		if d.Serial == "" {
			return usbDevice{}, false
		}
		d.ID = "usb-" + udevSafe(d.Vendor+"_"+d.Model+"_"+d.Serial)
		if mmc {
			d.ID = "mmc-" + udevSafe(d.Model+"_"+d.Serial) // as udev's by-id link names a card
		}
	}
	d.Busy = busyReason(sys, kernel, mounted)
	return d, true
}

// onUSBBus tells whether a resolved sysfs device path runs through a USB controller
// (/sys/devices/pci0000:00/.../usb2/2-1/2-1:1.0/host6/...).
func onUSBBus(devPath string) bool {
	for _, part := range strings.Split(devPath, string(filepath.Separator)) {
		if strings.HasPrefix(part, "usb") && len(part) > 3 && part[3] >= '0' && part[3] <= '9' {
			return true
		}
	}
	return false
}

// usbSerial walks up from the SCSI device to the USB device, which carries the serial number.
func usbSerial(dev string) string {
	for p := dev; p != "/" && p != "." && len(p) > 1; p = filepath.Dir(p) {
		if _, err := os.Stat(filepath.Join(p, "idVendor")); err == nil {
			return readAttr(p, "serial")
		}
	}
	return ""
}

// busyReason says why the host is using the device: the device or one of its partitions is
// mounted, or something (device-mapper, md) holds it or one of its partitions.
func busyReason(sys, kernel string, mounted map[string]bool) string {
	devs := []string{readAttr(sys, "dev")}
	parts, _ := filepath.Glob(filepath.Join(sys, kernel+"*", "dev"))
	for _, p := range parts {
		devs = append(devs, readAttr(filepath.Dir(p), "dev"))
	}
	for _, d := range devs {
		if d != "" && mounted[d] {
			return "mounted by the host (device " + d + ")"
		}
	}
	if holders, _ := os.ReadDir(filepath.Join(sys, "holders")); len(holders) > 0 {
		return "held by " + holders[0].Name()
	}
	for _, p := range parts {
		part := filepath.Dir(p)
		if holders, _ := os.ReadDir(filepath.Join(part, "holders")); len(holders) > 0 {
			return "partition " + filepath.Base(part) + " held by " + holders[0].Name()
		}
	}
	return ""
}

// readByID maps each device node (symlinks resolved) to the by-id names that point at it.
// Partition links (-partN) point at partitions and so never at a whole device.
func (c *USBConfig) readByID() map[string][]string {
	m := map[string][]string{}
	entries, err := os.ReadDir(c.ByIDDir)
	if err != nil {
		return m
	}
	for _, e := range entries {
		real, err := filepath.EvalSymlinks(filepath.Join(c.ByIDDir, e.Name()))
		if err != nil {
			continue
		}
		m[real] = append(m[real], e.Name())
	}
	for _, names := range m {
		sort.Strings(names)
	}
	return m
}

// mountedDevices are the major:minor numbers of every mounted file system's device.
func (c *USBConfig) mountedDevices() map[string]bool {
	m := map[string]bool{}
	data, err := os.ReadFile(c.MountInfo)
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(data), "\n") {
		// mount ID, parent ID, major:minor, ...
		f := strings.Fields(line)
		if len(f) > 2 {
			m[f[2]] = true
		}
	}
	return m
}

// allowed applies the allow and deny lists.
func (c *USBConfig) allowed(d *usbDevice) bool {
	type rule struct {
		allow, deny []string
		values      []string
	}
	rules := []rule{
		{c.AllowVendors, c.DenyVendors, []string{d.Vendor}},
		{c.AllowModels, c.DenyModels, []string{d.Model}},
		{c.AllowSerials, c.DenySerials, []string{d.Serial}},
		{c.AllowByID, c.DenyByID, append([]string{d.ID}, d.ByID...)},
	}
	anyAllow, allowedByOne := false, false
	for _, r := range rules {
		if matchAny(r.deny, r.values) {
			return false
		}
		if len(r.allow) > 0 {
			anyAllow = true
			if matchAny(r.allow, r.values) {
				allowedByOne = true
			}
		}
	}
	return !anyAllow || allowedByOne
}

func matchAny(patterns, values []string) bool {
	for _, p := range patterns {
		for _, v := range values {
			if ok, err := path.Match(p, v); err == nil && ok {
				return true
			}
		}
	}
	return false
}

// ValidatePatterns checks the allow and deny lists' patterns once, at start-up.
func (c *USBConfig) ValidatePatterns() error {
	for _, list := range [][]string{c.AllowVendors, c.DenyVendors, c.AllowModels, c.DenyModels,
		c.AllowSerials, c.DenySerials, c.AllowByID, c.DenyByID} {
		for _, p := range list {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("usb pool: pattern %q: %w", p, err)
			}
		}
	}
	for _, glob := range strings.Split(c.DeviceGlob, ",") {
		if _, err := filepath.Match(glob, ""); err != nil {
			return fmt.Errorf("usb pool: device glob %q: %w", glob, err)
		}
	}
	return nil
}

func readAttr(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// udevSafe replaces what udev replaces in by-id names: whitespace becomes '_', and anything
// outside printable ASCII or the path separator is dropped.
func udevSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			b.WriteByte('_')
		case r == '/' || r > unicode.MaxASCII || !unicode.IsPrint(r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// errNoDevice is wrapped by claims that find no device.
var errNoDevice = errors.New("no free usb device fits")
