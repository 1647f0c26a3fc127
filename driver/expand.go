package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-fat/csi-fat/node"
)

// ControllerExpandVolume grows a volume's image; its file system grows at NodeExpandVolume,
// while the volume is in use (ONLINE expansion). The controller service does not claim
// EXPAND_VOLUME (NodeExpandVolume grows the image itself when it is smaller than asked), so a CO
// need not call it; it answers those that do.
func (c *controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is missing")
	}
	cr := req.GetCapacityRange()
	if cr == nil {
		return nil, invalid("capacity range is missing")
	}
	required, limit := cr.GetRequiredBytes(), cr.GetLimitBytes()
	if required < 0 || limit < 0 {
		return nil, invalid("capacity range %d..%d is negative", required, limit)
	}
	if limit != 0 && limit < required {
		return nil, invalid("capacity limit %d is below the required %d bytes", limit, required)
	}
	if vc := req.GetVolumeCapability(); vc != nil {
		if err := node.CheckCapability(vc); err != nil {
			return nil, invalid("%v", err)
		}
	}
	rec, err := c.m.Volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	size, err := c.m.ExpandVolume(ctx, req.GetVolumeId(), required, limit)
	if err != nil {
		return nil, err
	}
	// A device's file system fills it already; an image's grows on the node.
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: rec.Device == ""}, nil
}
