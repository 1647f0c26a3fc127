package node

import (
	"fmt"
	"sort"
	"strings"

	"github.com/csi-fat/csi-fat/node/discovery"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/mediapool"
	"github.com/csi-fat/csi-fat/node/volume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DiscoveredVolumes are the node's volumes discovery mode made: named after their device.
func (m *Manager) DiscoveredVolumes() []volume.Record {
	m.store.Lock()
	defer m.store.Unlock()
	var out []volume.Record
	for _, v := range m.store.Volumes {
		if v.Device != "" && !v.Ephemeral && v.Name == discovery.VolumeName(m.cfg.NodeID, discovery.UnitKey(v.Device, v.Partition)) {
			out = append(out, *v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// CreateDiscoveredVolume makes the volume discovery mode publishes for a medium the pool's scan
// sees (MediaStatus), whole (partition "") or one FAT partition of it (its number, or a GPT
// partition's GUID): named after the node, the medium and the partition; holding the medium's
// FAT file system with its files (checked in a mounter, as adopt=true checks it), or, for a
// blank medium, a new one made with the configuration's parameters. It returns the volume and
// its file system's label.
func (m *Manager) CreateDiscoveredVolume(cfg *discovery.Config, medium media.Status, partition string) (volume.Record, string, error) {
	if m.usb == nil {
		return volume.Record{}, "", status.Errorf(codes.FailedPrecondition, "the removable-media pool is not enabled on node %s", m.cfg.NodeID)
	}
	params := cfg.AdoptParams()
	params.Partition = partition
	if medium.State == media.StateBlank {
		if !cfg.Blank {
			return volume.Record{}, "", status.Errorf(codes.FailedPrecondition, "removable medium %s is blank and blank media are not published", medium.ID)
		}
		params = cfg.FormatParams()
	}
	var label string
	name := discovery.VolumeName(m.cfg.NodeID, discovery.UnitKey(medium.ID, partition))
	rec, err := m.createVolume(name, 0, 0, params, m.claimMedium(medium.ID, &label))
	return rec, label, err
}

// claimMedium claims the named medium (or, adopting, the partition params.Partition names) for a
// discovered volume, the way claimUSB claims the one it picks: free (allowed, not used by the
// host, the part taken not claimed), then with adopt its file system checked in a mounter and
// kept (adoptUSB; its label put in *fsLabel), else formatted whole, when it is still blank.
// createVolume calls it with m.provision held.
func (m *Manager) claimMedium(id string, fsLabel *string) claimFunc {
	return func(_, _ int64, params volume.Params) (mediapool.Claim, error) {
		free, claims, _, err := m.media.Free()
		if err != nil {
			return mediapool.Claim{}, status.Error(codes.Internal, err.Error())
		}
		for _, d := range free {
			if d.ID != id {
				continue
			}
			if params.Adopt {
				c, why := m.media.Adopt(d, claims[d.ID], func(int64) bool { return true }, params)
				if c == nil {
					return mediapool.Claim{}, status.Errorf(codes.FailedPrecondition, "removable medium %s (%s): %s", d.ID, d.Kernel, strings.Join(why, "; "))
				}
				*fsLabel = c.Label
				return *c, nil
			}
			if c := claims[d.ID]; c != nil {
				return mediapool.Claim{}, status.Errorf(codes.FailedPrecondition, "removable medium %s: volumes hold its partitions (%s)", d.ID, c.Volumes())
			}
			if state, _, why := m.media.ProbeMedium(d); state != media.StateBlank {
				return mediapool.Claim{}, status.Errorf(codes.FailedPrecondition, "removable medium %s (%s) is no longer blank: %s", d.ID, d.Kernel, why)
			}
			part, err := m.media.FormatNew(d.Path, params)
			if err != nil {
				return mediapool.Claim{}, status.Errorf(claimCode(err, codes.Internal), "format removable medium %s (%s): %v", d.ID, d.Path, err)
			}
			*fsLabel = params.Label
			return mediapool.Claim{Dev: d, Size: part.Size, Label: params.Label}, nil
		}
		return mediapool.Claim{}, status.Errorf(codes.FailedPrecondition, "removable medium %s is not free: pulled out, used by the host or claimed", id)
	}
}

// MediaStatus looks at every device the removable-media pool's scan sees (mediapool.Pool.Status).
func (m *Manager) MediaStatus() ([]media.Status, error) {
	if m.media == nil {
		return nil, fmt.Errorf("the removable-media pool is not enabled")
	}
	return m.media.Status()
}
