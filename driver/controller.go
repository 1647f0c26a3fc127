package driver

import (
	"context"
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-fat/csi-fat/node"
	"github.com/csi-fat/csi-fat/node/volume"
)

// controller is the CSI controller service. It runs on every node and provisions volumes on
// that node only: the csi-provisioner sidecar in distributed mode sends it the requests whose
// topology names its node.
type controller struct {
	csi.UnimplementedControllerServer
	m *node.Manager
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// topology is the one topology this node's volumes are accessible from.
func (c *controller) topology() *csi.Topology {
	return &csi.Topology{Segments: map[string]string{c.m.TopologyKey(): c.m.NodeID()}}
}

// onThisNode tells whether a topology is satisfied by this node: each of its segments must be
// this node's.
func (c *controller) onThisNode(t *csi.Topology) bool {
	for k, v := range t.GetSegments() {
		if k != c.m.TopologyKey() || v != c.m.NodeID() {
			return false
		}
	}
	return true
}

// checkCapabilities validates a request's volume capabilities: at least one, each servable.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return fmt.Errorf("volume capabilities are missing")
	}
	for _, vc := range caps {
		if err := node.CheckCapability(vc); err != nil {
			return err
		}
	}
	return nil
}

// CreateVolume makes a volume on this node.
func (c *controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("volume name is missing")
	}
	if err := volume.ValidateName(req.GetName()); err != nil {
		return nil, invalid("%v", err)
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, invalid("%v", err)
	}
	required := req.GetCapacityRange().GetRequiredBytes()
	limit := req.GetCapacityRange().GetLimitBytes()
	if required < 0 || limit < 0 {
		return nil, invalid("capacity range %d..%d is negative", required, limit)
	}
	if limit != 0 && limit < required {
		return nil, invalid("capacity limit %d is below the required %d bytes", limit, required)
	}
	source, err := contentSource(req)
	if err != nil {
		return nil, err
	}
	params, err := volume.ParseParams(req.GetParameters())
	if err != nil {
		return nil, invalid("%v", err)
	}
	if requisite := req.GetAccessibilityRequirements().GetRequisite(); len(requisite) > 0 {
		ok := false
		for _, t := range requisite {
			ok = ok || c.onThisNode(t)
		}
		if !ok {
			return nil, status.Errorf(codes.ResourceExhausted, "volumes are made on the node that is asked, and the requisite topology %v does not include node %s (%s=%s)",
				requisite, c.m.NodeID(), c.m.TopologyKey(), c.m.NodeID())
		}
	}
	var rec volume.Record
	if source != nil {
		rec, err = c.m.Snapshots().CreateVolumeFrom(ctx, req.GetName(), required, limit, params, *source)
	} else {
		rec, err = c.m.CreateVolume(ctx, req.GetName(), required, limit, params)
	}
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           rec.ID,
		CapacityBytes:      rec.Size,
		VolumeContext:      rec.Params.Map(),
		ContentSource:      sourceOf(rec),
		AccessibleTopology: []*csi.Topology{c.topology()},
	}}, nil
}

// DeleteVolume removes a volume of this node.
func (c *controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is missing")
	}
	if err := c.m.DeleteVolume(ctx, req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// ValidateVolumeCapabilities confirms capabilities the volume can be used with.
func (c *controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, invalid("volume capabilities are missing")
	}
	rec, err := c.m.Volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	if len(req.GetParameters()) > 0 {
		p, err := volume.ParseParams(req.GetParameters())
		if err != nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
		}
		if p != rec.Params {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("volume %s was made with other parameters: %v", rec.ID, rec.Params.Map())}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// listTokenPrefix starts every ListVolumes token: the rest is the name of the last volume of the
// page before. Volumes are listed in name order, so a page goes on after that name whether or
// not the volume still exists: none is listed twice, and none that existed throughout is missed.
const listTokenPrefix = "after:"

// ListVolumes lists this node's volumes (each node's controller knows its own: provisioning is
// distributed), a page at a time.
func (c *controller) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, invalid("max_entries %d is negative", req.GetMaxEntries())
	}
	after := ""
	if t := req.GetStartingToken(); t != "" {
		name, ok := strings.CutPrefix(t, listTokenPrefix)
		if !ok || volume.ValidateName(name) != nil {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not one ListVolumes gave; start again without one", t)
		}
		after = name
	}
	recs, more := c.m.ListVolumes(after, int(req.GetMaxEntries()))
	resp := &csi.ListVolumesResponse{}
	for _, rec := range recs {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: &csi.Volume{
			VolumeId:           rec.ID,
			CapacityBytes:      rec.Size,
			VolumeContext:      rec.Params.Map(),
			ContentSource:      sourceOf(rec),
			AccessibleTopology: []*csi.Topology{c.topology()},
		}})
	}
	if more {
		resp.NextToken = listTokenPrefix + recs[len(recs)-1].Name
	}
	return resp, nil
}

// GetCapacity reports the largest volume that can still be made on this node with these
// parameters; 0 for a topology that is not this node's or capabilities it cannot serve.
func (c *controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	params, err := volume.ParseParams(req.GetParameters())
	if err != nil {
		return nil, invalid("%v", err)
	}
	if t := req.GetAccessibleTopology(); t != nil && !c.onThisNode(t) {
		return &csi.GetCapacityResponse{}, nil
	}
	for _, vc := range req.GetVolumeCapabilities() {
		if node.CheckCapability(vc) != nil {
			return &csi.GetCapacityResponse{}, nil
		}
	}
	if params.Pool == volume.PoolUSB && !c.m.USBEnabled() {
		return &csi.GetCapacityResponse{}, nil
	}
	avail, err := c.m.Capacity(params)
	if err != nil {
		return nil, err
	}
	return &csi.GetCapacityResponse{
		AvailableCapacity: avail,
		MaximumVolumeSize: wrapperspb.Int64(avail),
	}, nil
}

// ControllerGetCapabilities lists what the controller service does.
func (c *controller) ControllerGetCapabilities(ctx context.Context, req *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		// No EXPAND_VOLUME: a volume grows on its own node, at NodeExpandVolume. On a cluster of
		// several nodes every node's csi-resizer would otherwise call ControllerExpandVolume on
		// its own node's driver, which holds only its node's volumes (docs/driver.md, "Sidecars").
	} {
		caps = append(caps, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}
