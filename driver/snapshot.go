package driver

import (
	"context"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/csi-fat/csi-fat/node/snapshots"
	"github.com/csi-fat/csi-fat/node/volume"
)

// CreateSnapshot takes a point-in-time copy of a volume of this node into its image pool; a
// volume in use is held only for as long as the copy needs (see docs/driver.md, "Snapshots").
// The copy is whole when it answers: the snapshot is ready to use.
func (c *controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("snapshot name is missing")
	}
	if req.GetSourceVolumeId() == "" {
		return nil, invalid("source volume ID is missing")
	}
	if len(req.GetParameters()) > 0 {
		return nil, invalid("snapshots take no parameters, got %v", req.GetParameters())
	}
	snap, err := c.m.Snapshots().CreateSnapshot(ctx, req.GetName(), req.GetSourceVolumeId())
	if err != nil {
		return nil, err
	}
	return &csi.CreateSnapshotResponse{Snapshot: snapshotOf(snap)}, nil
}

func snapshotOf(s volume.SnapshotRecord) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     s.ID,
		SourceVolumeId: s.Source,
		SizeBytes:      s.Size,
		CreationTime:   timestamppb.New(s.Created),
		ReadyToUse:     s.Ready,
	}
}

// DeleteSnapshot removes a snapshot of this node.
func (c *controller) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, invalid("snapshot ID is missing")
	}
	if err := c.m.Snapshots().DeleteSnapshot(ctx, req.GetSnapshotId()); err != nil {
		return nil, err
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists this node's snapshots, a page at a time, in name order as ListVolumes
// does; a snapshot ID or source volume ID that names nothing here gives an empty list.
func (c *controller) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, invalid("max_entries %d is negative", req.GetMaxEntries())
	}
	after := ""
	if t := req.GetStartingToken(); t != "" {
		name, ok := strings.CutPrefix(t, listTokenPrefix)
		if !ok || volume.ValidateName(name) != nil {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not one ListSnapshots gave; start again without one", t)
		}
		after = name
	}
	recs, more := c.m.Snapshots().ListSnapshots(snapshots.Filter{ID: req.GetSnapshotId(), Source: req.GetSourceVolumeId()}, after, int(req.GetMaxEntries()))
	resp := &csi.ListSnapshotsResponse{}
	for _, s := range recs {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snapshotOf(s)})
	}
	if more {
		resp.NextToken = listTokenPrefix + recs[len(recs)-1].Name
	}
	return resp, nil
}

// contentSource reads a CreateVolume request's content source: nil for a fresh volume.
func contentSource(req *csi.CreateVolumeRequest) (*snapshots.ContentSource, error) {
	cs := req.GetVolumeContentSource()
	if cs == nil {
		return nil, nil
	}
	switch {
	case cs.GetSnapshot() != nil:
		if cs.GetSnapshot().GetSnapshotId() == "" {
			return nil, invalid("the volume content source's snapshot ID is missing")
		}
		return &snapshots.ContentSource{Snapshot: cs.GetSnapshot().GetSnapshotId()}, nil
	case cs.GetVolume() != nil:
		if cs.GetVolume().GetVolumeId() == "" {
			return nil, invalid("the volume content source's volume ID is missing")
		}
		return &snapshots.ContentSource{Volume: cs.GetVolume().GetVolumeId()}, nil
	}
	return nil, invalid("the volume content source names neither a snapshot nor a volume")
}

// sourceOf is the content source a volume was made from, as CreateVolume and ListVolumes answer
// it; nil for a fresh volume.
func sourceOf(rec volume.Record) *csi.VolumeContentSource {
	switch {
	case rec.Source == "":
		return nil
	case strings.HasPrefix(rec.Source, volume.SnapshotPool+":"):
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: rec.Source}}}
	default:
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: rec.Source}}}
	}
}
