package node

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
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
		if params.Adopt {
			if err := m.checkAdoptable(d); err != nil {
				why = append(why, fmt.Sprintf("%s: not adoptable: %v", d.ID, err))
				continue
			}
			return d, nil
		}
		if err := formatDevice(d.Path, params); errors.Is(err, blockdev.ErrInUse) {
			why = append(why, fmt.Sprintf("%s: %v", d.ID, err)) // another writer has it: try the next
			continue
		} else if err != nil {
			return usbDevice{}, status.Errorf(codes.Internal, "format usb device %s (%s): %v", d.ID, d.Path, err)
		}
		return d, nil
	}
	why = append(why, skipped...)
	if len(why) == 0 {
		why = []string{"no free usb device is attached"}
	}
	return usbDevice{}, status.Errorf(codes.ResourceExhausted, "%v for %d..%d bytes: %s", errNoDevice, required, limit, strings.Join(why, "; "))
}

// formatDevice writes a fresh empty file system over the whole device, claimed (O_EXCL) while
// it does.
func formatDevice(path string, params Params) error {
	dev, err := blockdev.Open(path, false)
	if err != nil {
		return err
	}
	return formatAndClose(dev, params)
}

// formatAndClose formats dev with the StorageClass parameters, then closes it.
func formatAndClose(dev *blockdev.File, params Params) error {
	opts, err := params.mkfsOptions(dev.LogicalBlockSize())
	if err == nil {
		_, err = mkfs.Format(dev, opts)
	}
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkFileSystem makes sure a device holds a FAT file system that is whole and that the
// engine can serve: fatvol/fsck finds no error (fsck.fat -n's verdict; a volume not cleanly
// unmounted counts), and the engine opens it read-only and reads every directory. The device is
// claimed for the whole check (a device another writer holds is refused, blockdev.ErrInUse), so
// what is checked cannot change under it.
func checkFileSystem(path string) error {
	dev, err := blockdev.OpenClaimed(path, blockdev.ExclusiveReadOnly)
	if err != nil {
		return err
	}
	rep, err := fsck.Check(dev)
	if err != nil {
		dev.Close()
		return fmt.Errorf("check %s: %w", path, err)
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
		return fmt.Errorf("check %s: the file system needs repair: %s", path, strings.Join(msgs, "; "))
	}
	vol, err := fatvol.Open(dev, fatvol.Options{ReadOnly: true, Logger: engineLogger()})
	if err != nil {
		dev.Close()
		return err
	}
	walkErr := fs.WalkDir(vol, ".", func(_ string, _ fs.DirEntry, err error) error { return err })
	if err := vol.Close(); walkErr == nil {
		walkErr = err
	}
	if walkErr != nil {
		return fmt.Errorf("%s: %w", path, walkErr)
	}
	return nil
}
