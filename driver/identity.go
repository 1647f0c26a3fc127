package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-fat/csi-fat/node"
)

// identity is the CSI identity service.
type identity struct {
	csi.UnimplementedIdentityServer
	name    string
	manager *node.Manager
}

func (i *identity) GetPluginInfo(ctx context.Context, req *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.name, VendorVersion: Version}, nil
}

// GetPluginCapabilities: a controller service, volumes reachable on one node only, and online
// volume expansion.
func (i *identity) GetPluginCapabilities(ctx context.Context, req *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	for _, t := range []csi.PluginCapability_Service_Type{
		csi.PluginCapability_Service_CONTROLLER_SERVICE,
		csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS,
	} {
		caps = append(caps, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}},
		})
	}
	caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE},
	}})
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe answers ready once the image pool's file system answers: the node-local state was read
// and staged volumes restored before the server started listening.
func (i *identity) Probe(ctx context.Context, req *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if err := i.manager.Probe(); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
