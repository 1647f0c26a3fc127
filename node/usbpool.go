package node

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/fatvol/layout"
)

// freeUSB lists the devices a new volume may claim: allowed by the lists, not used by the host,
// not claimed by another volume; smallest first.
func (m *Manager) freeUSB() ([]usbDevice, []string, error) {
	devs, err := m.usb.scanUSB(true)
	if err != nil {
		return nil, nil, err
	}
	claimed := map[string]bool{}
	m.mu.Lock()
	for _, v := range m.state.Volumes {
		if v.Device != "" {
			claimed[v.Device] = true
		}
	}
	m.mu.Unlock()
	var free []usbDevice
	var skipped []string
	for _, d := range devs {
		switch {
		case claimed[d.ID]:
		case d.Busy != "":
			skipped = append(skipped, fmt.Sprintf("%s (%s): %s", d.ID, d.Kernel, d.Busy))
		default:
			free = append(free, d)
		}
	}
	return free, skipped, nil
}

// claimUSB picks the smallest free device whose size lies in [required, limit] and prepares it:
// with adopt its file system is checked and kept, else the device is formatted. The caller holds
// m.provision, so no two volumes claim one device.
func (m *Manager) claimUSB(required, limit int64, params Params) (usbDevice, error) {
	free, skipped, err := m.freeUSB()
	if err != nil {
		return usbDevice{}, status.Error(codes.Internal, err.Error())
	}
	var why []string
	for _, d := range free {
		if d.Size < required || (limit != 0 && d.Size > limit) {
			why = append(why, fmt.Sprintf("%s: %d bytes", d.ID, d.Size))
			continue
		}
		if miss := params.selection.mismatch(d); miss != "" {
			why = append(why, fmt.Sprintf("%s: %s", d.ID, miss))
			continue
		}
		if params.Adopt {
			label, err := m.checkAdoptable(d)
			if err != nil {
				why = append(why, fmt.Sprintf("%s: not adoptable: %v", d.ID, err))
				continue
			}
			if miss := params.selection.labelMismatch(label); miss != "" {
				why = append(why, fmt.Sprintf("%s: %s", d.ID, miss))
				continue
			}
			return d, nil
		}
		var foreign *foreignError
		if err := m.formatNewDevice(d.Path, params); errors.Is(err, blockdev.ErrInUse) {
			why = append(why, fmt.Sprintf("%s: %v", d.ID, err)) // another writer has it: try the next
			continue
		} else if errors.As(err, &foreign) {
			klog.InfoS("removable medium not formatted: it holds something else than FAT", "device", d.ID, "reason", foreign.reason)
			why = append(why, fmt.Sprintf("%s: %v", d.ID, err))
			continue
		} else if err != nil {
			return usbDevice{}, status.Errorf(codes.Internal, "format removable medium %s (%s): %v", d.ID, d.Path, err)
		}
		return d, nil
	}
	why = append(why, skipped...)
	if len(why) == 0 {
		why = []string{"no free removable medium is attached"}
	}
	return usbDevice{}, status.Errorf(codes.ResourceExhausted, "%v for %d..%d bytes: %s", errNoDevice, required, limit, strings.Join(why, "; "))
}

// formatDevice writes a fresh empty file system on the device (over the whole of it, or in an
// MBR's one partition with layout=mbr), claimed (O_EXCL) while it does.
func formatDevice(path string, params Params) error {
	dev, err := blockdev.Open(path, false)
	if err != nil {
		return err
	}
	return formatAndClose(dev, params)
}

// foreignError says why a stick was not formatted for a new volume: it holds something else
// than FAT (another file system, an encrypted or LVM volume, a partition table without a FAT
// partition, content nothing recognises), which only wipe=true may destroy.
type foreignError struct{ reason string }

func (e *foreignError) Error() string {
	return fmt.Sprintf("not formatted: %s (%s=true formats it)", e.reason, ParamWipe)
}

// formatNewDevice formats a free device for a new volume, claimed (O_EXCL) from the look at
// what it holds to the end of the format: a FAT one or a blank one, and anything with wipe=true;
// else a *foreignError and nothing written.
func (m *Manager) formatNewDevice(path string, params Params) error {
	dev, err := blockdev.Open(path, false)
	if err != nil {
		return err
	}
	defer m.forgetProbe(path)
	if !params.Wipe {
		r, err := m.probeForFormat(dev)
		if err == nil && !r.Usable && !r.Blank {
			err = &foreignError{reason: r.Reason}
		}
		if err != nil {
			dev.Close()
			return err
		}
	}
	return formatAndClose(dev, params)
}

// formatAndClose formats dev with the StorageClass parameters (in the layout they name: the
// whole device, or one FAT partition of an MBR), then closes it.
func formatAndClose(dev *blockdev.File, params Params) error {
	opts, err := params.mkfsOptions(dev.LogicalBlockSize())
	if err == nil {
		_, _, err = layout.Format(dev, params.layoutKind(), opts)
	}
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkFileSystem makes sure a device holds a FAT file system (on the whole device, or in the
// first FAT partition of a partitioned stick) that is whole and that the engine can serve, and
// returns its label: fatvol/fsck finds no error (fsck.fat -n's verdict; a volume not cleanly
// unmounted counts), and the engine opens it read-only and reads every directory. The device is
// claimed for the whole check (a device another writer holds is refused, blockdev.ErrInUse), so
// what is checked cannot change under it.
func checkFileSystem(path string) (string, error) {
	file, err := blockdev.OpenClaimed(path, blockdev.ExclusiveReadOnly)
	if err != nil {
		return "", err
	}
	dev, _, err := layout.Open(file, "")
	if err != nil {
		file.Close()
		return "", fmt.Errorf("%s: %w", path, err)
	}
	rep, err := fsck.Check(dev)
	if err != nil {
		dev.Close()
		return "", fmt.Errorf("check %s: %w", path, err)
	}
	if !rep.Clean() {
		problems := rep.Errors()
		var msgs []string
		for i, p := range problems {
			if i == 3 {
				msgs = append(msgs, fmt.Sprintf("and %d more", len(problems)-i))
				break
			}
			msgs = append(msgs, p.String())
		}
		dev.Close()
		return "", fmt.Errorf("check %s: the file system needs repair: %s", path, strings.Join(msgs, "; "))
	}
	vol, err := fatvol.Open(dev, fatvol.Options{ReadOnly: true, Logger: engineLogger()})
	if err != nil {
		dev.Close()
		return "", err
	}
	walkErr := fs.WalkDir(vol, ".", func(_ string, _ fs.DirEntry, err error) error { return err })
	label := vol.Label()
	if err := vol.Close(); walkErr == nil {
		walkErr = err
	}
	if walkErr != nil {
		return "", fmt.Errorf("%s: %w", path, walkErr)
	}
	return label, nil
}
