package node

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatvol/layout"
)

// The USB pool's view of each device it may use, so that why a stick is not used shows in the
// metrics (csi_fat_usb_devices) and not only in the logs.
const (
	mediumClaimed    = "claimed"    // a volume has it
	mediumBusy       = "busy"       // the host uses it: mounted (or a partition is), held by device-mapper or md
	mediumFAT        = "fat"        // free, holds FAT (whole, or in a partition): adoptable, and formatted for a new volume
	mediumBlank      = "blank"      // free and blank: formatted for a new volume
	mediumForeign    = "foreign"    // free, holds something else: formatted only with wipe=true
	mediumUnreadable = "unreadable" // free, but its first sectors cannot be read
)

// usbMedium is one device the pool sees: its state and, for what it holds, a short kind (for
// fat: superfloppy or partition; for foreign: blkid's type such as exfat, ntfs, ext4,
// crypto_LUKS, or partition_table, invalid_table, unknown; for busy: mounted or held).
type usbMedium struct {
	id, state, content string
}

// usbMedia classifies every device the pool's filters allow. Free devices are read (a few KiB,
// layout.Probe) without claiming them.
func (m *Manager) usbMedia() ([]usbMedium, error) {
	devs, err := m.usb.scanUSB(true)
	if err != nil {
		return nil, err
	}
	claimed := map[string]bool{}
	m.mu.Lock()
	for _, v := range m.state.Volumes {
		if v.Device != "" {
			claimed[v.Device] = true
		}
	}
	m.mu.Unlock()
	out := make([]usbMedium, 0, len(devs))
	for _, d := range devs {
		med := usbMedium{id: d.ID}
		switch {
		case claimed[d.ID]:
			med.state = mediumClaimed
		case d.Busy != "":
			med.state, med.content = mediumBusy, "mounted"
			if !strings.HasPrefix(d.Busy, "mounted") {
				med.content = "held"
			}
		default:
			med.state, med.content = probeMedium(d)
		}
		out = append(out, med)
	}
	return out, nil
}

// probeMedium names what a free device holds.
func probeMedium(d usbDevice) (state, content string) {
	f, err := os.Open(d.Path)
	if err != nil {
		return mediumUnreadable, ""
	}
	defer f.Close()
	lbs := 512
	if n, err := unix.IoctlGetUint32(int(f.Fd()), unix.BLKSSZGET); err == nil && n >= 512 {
		lbs = int(n)
	}
	r, err := layout.Probe(rawMedium{f, d.Size, lbs})
	switch {
	case err != nil:
		return mediumUnreadable, ""
	case r.Usable && r.FAT.Number == 0:
		return mediumFAT, "superfloppy"
	case r.Usable:
		return mediumFAT, "partition"
	case r.Blank:
		return mediumBlank, ""
	case r.Whole != nil:
		return mediumForeign, r.Whole.Type
	case r.Layout == nil:
		return mediumForeign, "invalid_table"
	case r.Layout.Kind == layout.MBR || r.Layout.Kind == layout.GPT:
		return mediumForeign, "partition_table"
	}
	return mediumForeign, "unknown"
}

// rawMedium reads a device opened without a claim: a look at what it holds, nothing more.
type rawMedium struct {
	f    *os.File
	size int64
	lbs  int
}

func (r rawMedium) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(p, off) }
func (r rawMedium) Size() int64                             { return r.size }
func (r rawMedium) LogicalBlockSize() int                   { return r.lbs }
