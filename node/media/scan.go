package media

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

	"github.com/csi-fat/csi-fat/node/volume"
)

// Config says where to look for removable media (USB disks, SD/MMC cards, and any block
// device an administrator names by a by-id or by-path pattern) and which may be used. The
// defaults are the real system's places; tests point them at a tree of their own whose devices
// are loop devices. Volume IDs still carry the pool's first name, usb.
type Config struct {
	SysfsRoot  string // "/sys": block devices are <SysfsRoot>/block/<name>
	DeviceGlob string // "sd*,mmcblk*": which names under <SysfsRoot>/block are candidates (comma-separated globs)
	DevDir     string // "/dev": where <name>'s device node is
	ByIDDir    string // "/dev/disk/by-id": stable names of devices
	ByPathDir  string // "/dev/disk/by-path": names of devices by the port they are plugged into
	MountInfo  string // "/proc/self/mountinfo": devices mounted by the host are never claimed

	// Allow and deny lists, each a list of shell patterns (path.Match). A device is usable when
	// it matches no deny pattern and, if any allow pattern is given, at least one allow pattern.
	AllowVendors, DenyVendors []string
	AllowModels, DenyModels   []string
	AllowSerials, DenySerials []string
	AllowByID, DenyByID       []string // matched against the names in ByIDDir
	AllowByPath, DenyByPath   []string // matched against the names in ByPathDir

	// IncludeByID and IncludeByPath make any whole block device with a matching by-id or
	// by-path name a member of the pool, removable or not, on whatever bus (a card reader that
	// reports fixed media, a SATA hot-swap bay); the allow and deny lists still apply. The
	// device glob does not limit them.
	IncludeByID, IncludeByPath []string
}

// DefaultConfig is the real system's layout with no allow, deny or include lists.
func DefaultConfig() Config {
	return Config{
		SysfsRoot:  "/sys",
		DeviceGlob: "sd*,mmcblk*",
		DevDir:     "/dev",
		ByIDDir:    "/dev/disk/by-id",
		ByPathDir:  "/dev/disk/by-path",
		MountInfo:  "/proc/self/mountinfo",
	}
}

// Device is a whole block device of the pool: a removable disk on a USB bus, an SD/MMC card,
// or a device an include pattern names.
type Device struct {
	// ID is the device's stable identity: its by-id name (usb-<vendor>_<model>_<serial>-0:0 as
	// udev makes it) when there is one, else one built the same way from sysfs, else (for a
	// device an include pattern names) its by-path name. It survives re-plugging, unlike the
	// kernel name.
	ID     string
	Kernel string // sdb: for messages only
	Path   string // /dev/sdb, valid until the device goes away
	Size   int64
	Vendor string
	Model  string
	Serial string
	ByID   []string
	ByPath []string
	// Busy says why the host is using the device (mounted, held by device-mapper), or "".
	Busy string
}

// Seen is a block device the scan looked at, and why it is not in the pool ("" when it
// is), for the status page: what an administrator sees when a stick is not used.
type Seen struct {
	Device
	Excluded string
}

// Scan lists the devices of the pool present, filters applied or not. Devices that cannot
// be identified stably (no serial and no by-id name) are left out: a volume must find its device
// again after a re-plug.
func (c *Config) Scan(filtered bool) ([]Device, error) {
	seen, err := c.ScanAll()
	if err != nil {
		return nil, err
	}
	var out []Device
	for _, d := range seen {
		if d.Excluded == "" || (!filtered && d.Excluded == ExcludedByLists) {
			out = append(out, d.Device)
		}
	}
	return out, nil
}

// Why a device the scan looked at is not a member of the pool. ExcludedByLists is the only reason
// that does not stop a volume already made on the device: it keeps working.
const (
	ExcludedByLists      = "left out by the allow and deny lists"
	ExcludedNotWhole     = "not a whole block device (a partition, or gone)"
	ExcludedNotRemovable = "not removable, and no include pattern names it"
	ExcludedNotOnBus     = "not on a USB or MMC bus, and no include pattern names it"
	ExcludedNoMedium     = "no medium"
	ExcludedNoIdentity   = "no serial number and no by-id name: it could not be found again after a re-plug"
)

// ScanAll looks at every candidate: the names under <SysfsRoot>/block the device glob matches,
// and the devices the include patterns name. Members of the pool come first, smallest first;
// then those the allow and deny lists leave out, then the others, each with the reason it is not
// a member.
func (c *Config) ScanAll() ([]Seen, error) {
	names := map[string]bool{}
	for _, glob := range strings.Split(c.DeviceGlob, ",") {
		found, err := filepath.Glob(filepath.Join(c.SysfsRoot, "block", glob))
		if err != nil {
			return nil, fmt.Errorf("removable media: device glob %q: %w", glob, err)
		}
		for _, f := range found {
			names[filepath.Base(f)] = true
		}
	}
	byID := readLinks(c.ByIDDir)
	byPath := readLinks(c.ByPathDir)
	for _, m := range []struct {
		links    map[string][]string
		patterns []string
	}{{byID, c.IncludeByID}, {byPath, c.IncludeByPath}} {
		for real, links := range m.links {
			if volume.MatchAny(m.patterns, links) && strings.HasPrefix(real, c.DevDir+"/") {
				names[filepath.Base(real)] = true // a partition has no /sys/block entry: probe says so
			}
		}
	}
	mounted := c.mountedDevices()
	var out []Seen
	for name := range names {
		d := c.probe(filepath.Join(c.SysfsRoot, "block", name), byID, byPath, mounted)
		if d.Excluded == "" && !c.allowed(&d.Device) {
			d.Excluded = ExcludedByLists
		}
		out = append(out, d)
	}
	rank := func(d Seen) int {
		switch d.Excluded {
		case "":
			return 0
		case ExcludedByLists:
			return 1
		}
		return 2
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		if a.Excluded == "" && a.Size != b.Size {
			return a.Size < b.Size
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Kernel < b.Kernel
	})
	return out, nil
}

// Find finds a device by its stable ID, whatever the filters say now: a volume already made
// on it keeps working.
func (c *Config) Find(id string) (Device, error) {
	devs, err := c.Scan(false)
	if err != nil {
		return Device{}, err
	}
	for _, d := range devs {
		if d.ID == id {
			return d, nil
		}
	}
	return Device{}, fmt.Errorf("removable medium %s is not attached: %w", id, os.ErrNotExist)
}

// probe reads one /sys/block entry and says why it is not a member of the pool, if it is not:
// not removable nor on a USB or MMC bus (and named by no include pattern), no medium, no stable
// identity.
func (c *Config) probe(sys string, byID, byPath map[string][]string, mounted map[string]bool) Seen {
	kernel := filepath.Base(sys)
	d := Device{Kernel: kernel, Path: filepath.Join(c.DevDir, kernel)}
	if real, err := filepath.EvalSymlinks(d.Path); err == nil {
		d.ByID, d.ByPath = byID[real], byPath[real]
	}
	if _, err := os.Stat(sys); err != nil {
		return Seen{d, ExcludedNotWhole}
	}
	sectors, _ := strconv.ParseInt(readAttr(sys, "size"), 10, 64)
	d.Size = max(sectors, 0) * 512 // sysfs counts 512-byte sectors whatever the device's block size
	included := volume.MatchAny(c.IncludeByID, d.ByID) || volume.MatchAny(c.IncludeByPath, d.ByPath)
	dev, err := filepath.EvalSymlinks(filepath.Join(sys, "device"))
	usb := err == nil && onUSBBus(dev)
	mmc := err == nil && onMMCBus(dev)
	if err != nil {
		dev = ""
	}
	switch {
	case included:
	case readAttr(sys, "removable") != "1":
		return Seen{d, ExcludedNotRemovable}
	case !usb && !mmc:
		return Seen{d, ExcludedNotOnBus}
	}
	if d.Size == 0 {
		return Seen{d, ExcludedNoMedium} // an empty card reader, or unreadable
	}
	if dev != "" {
		d.Vendor, d.Model, d.Serial = readAttr(dev, "vendor"), readAttr(dev, "model"), usbSerial(dev)
	}
	if mmc {
		d.Vendor, d.Model, d.Serial = mmcIdentity(dev)
	}
	for _, id := range d.ByID {
		if strings.HasPrefix(id, "usb-") || strings.HasPrefix(id, "mmc-") {
			d.ID = id
			break
		}
	}
	switch {
	case d.ID != "":
	case len(d.ByID) > 0:
		d.ID = d.ByID[0]
	case usb && d.Serial != "":
		d.ID = "usb-" + udevSafe(d.Vendor+"_"+d.Model+"_"+d.Serial)
	case mmc && d.Serial != "":
		d.ID = "mmc-" + udevSafe(d.Model+"_"+d.Serial) // as udev's by-id link names a card
	case included && len(d.ByPath) > 0:
		// The administrator named the port: the device is found again in that port.
		d.ID = d.ByPath[0]
	default:
		return Seen{d, ExcludedNoIdentity}
	}
	d.Busy = busyReason(sys, kernel, mounted)
	return Seen{d, ""}
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

// readLinks maps each device node (symlinks resolved) to the names in dir (by-id, by-path)
// that point at it. Partition links (-partN) point at partitions and so never at a whole device.
func readLinks(dir string) map[string][]string {
	m := map[string][]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return m
	}
	for _, e := range entries {
		real, err := filepath.EvalSymlinks(filepath.Join(dir, e.Name()))
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
func (c *Config) mountedDevices() map[string]bool {
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
func (c *Config) allowed(d *Device) bool {
	type rule struct {
		allow, deny []string
		values      []string
	}
	rules := []rule{
		{c.AllowVendors, c.DenyVendors, []string{d.Vendor}},
		{c.AllowModels, c.DenyModels, []string{d.Model}},
		{c.AllowSerials, c.DenySerials, []string{d.Serial}},
		{c.AllowByID, c.DenyByID, append([]string{d.ID}, d.ByID...)},
		{c.AllowByPath, c.DenyByPath, d.ByPath},
	}
	anyAllow, allowedByOne := false, false
	for _, r := range rules {
		if volume.MatchAny(r.deny, r.values) {
			return false
		}
		if len(r.allow) > 0 {
			anyAllow = true
			if volume.MatchAny(r.allow, r.values) {
				allowedByOne = true
			}
		}
	}
	return !anyAllow || allowedByOne
}

// ValidatePatterns checks the allow and deny lists' patterns once, at start-up.
func (c *Config) ValidatePatterns() error {
	for _, list := range [][]string{c.AllowVendors, c.DenyVendors, c.AllowModels, c.DenyModels,
		c.AllowSerials, c.DenySerials, c.AllowByID, c.DenyByID, c.AllowByPath, c.DenyByPath,
		c.IncludeByID, c.IncludeByPath} {
		for _, p := range list {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("removable media: pattern %q: %w", p, err)
			}
		}
	}
	for _, glob := range strings.Split(c.DeviceGlob, ",") {
		if _, err := filepath.Match(glob, ""); err != nil {
			return fmt.Errorf("removable media: device glob %q: %w", glob, err)
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

// ErrNoDevice is wrapped by claims that find no device.
var ErrNoDevice = errors.New("no free removable medium fits")
