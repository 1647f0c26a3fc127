package node

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-fat/csi-fat/node/serving"
)

// fsTypes are the file system types a capability may name: FAT under the names mount(8) and
// Kubernetes use. Empty means the driver's choice.
var fsTypes = map[string]bool{"": true, "vfat": true, "fat": true, "msdos": true}

// CheckCapability tells why a volume capability cannot be served, or nil. FAT volumes are file
// systems on one node: mount access only (no raw block), single-node access modes only, and the
// mount flags must be options the FAT mount knows.
func CheckCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return fmt.Errorf("volume capability is missing")
	}
	mnt := c.GetMount()
	if mnt == nil {
		if c.GetBlock() != nil {
			return fmt.Errorf("raw block access is not supported: volumes are FAT file systems")
		}
		return fmt.Errorf("volume capability has no access type")
	}
	if !fsTypes[mnt.GetFsType()] {
		return fmt.Errorf("file system type %q is not supported: want vfat", mnt.GetFsType())
	}
	if _, err := serving.MountOptions(mnt.GetMountFlags(), mnt.GetVolumeMountGroup(), false); err != nil {
		return err
	}
	return checkAccessMode(c.GetAccessMode())
}

func checkAccessMode(am *csi.VolumeCapability_AccessMode) error {
	if am == nil {
		return fmt.Errorf("volume capability has no access mode")
	}
	switch am.GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return nil
	case csi.VolumeCapability_AccessMode_UNKNOWN:
		return fmt.Errorf("access mode is unknown")
	default:
		return fmt.Errorf("access mode %s is not supported: volumes live on one node", am.GetMode())
	}
}

// readOnlyMode tells whether an access mode allows reading only.
func readOnlyMode(c *csi.VolumeCapability) bool {
	return c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
}

// multiTarget tells whether an access mode lets a volume be published at more than one target
// on its node at a time. The spec's table for plugins with the SINGLE_NODE_MULTI_WRITER
// capability allows it for SINGLE_NODE_MULTI_WRITER only; SINGLE_NODE_SINGLE_WRITER
// (ReadWriteOncePod) and the older SINGLE_NODE_WRITER and SINGLE_NODE_READER_ONLY are published
// once. Kubernetes asks for SINGLE_NODE_MULTI_WRITER for ReadWriteOnce from drivers that claim
// the capability, so pods on one node still share a ReadWriteOnce volume.
func multiTarget(mode csi.VolumeCapability_AccessMode_Mode) bool {
	return mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
}
