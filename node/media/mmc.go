package media

import (
	"path/filepath"
	"strings"
)

// SD and MMC cards in a built-in reader are mmcblk devices on the MMC bus, not USB: the pool takes
// them too when they are removable (an eMMC soldered on the board is not) and the device glob
// names them (mmcblk*). Their partitions are mmcblkNpM.

// onMMCBus tells whether a resolved sysfs device path is a card on an MMC host
// (/sys/devices/platform/fe320000.mmc/mmc_host/mmc1/mmc1:aaaa).
func onMMCBus(devPath string) bool {
	for _, part := range strings.Split(devPath, string(filepath.Separator)) {
		if part == "mmc_host" {
			return true
		}
	}
	return false
}

// mmcIdentity reads a card's identity from its sysfs device: the manufacturer ID (manfid, such
// as 0x000003) for the vendor, the product name (name) for the model and the serial number.
func mmcIdentity(dev string) (vendor, model, serial string) {
	return readAttr(dev, "manfid"), readAttr(dev, "name"), readAttr(dev, "serial")
}
