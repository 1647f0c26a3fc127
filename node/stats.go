package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/volume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// condition judges a served volume's health: its device still there and answering, its mount
// alive at path.
func (m *Manager) condition(rec volume.Record, h health, path string) (abnormal bool, msg string) {
	if rec.Device != "" && m.usb != nil {
		if _, err := m.usb.Find(rec.Device); err != nil {
			return true, fmt.Sprintf("removable medium %s has disappeared: %v", rec.Device, err)
		}
	} else if rec.Device == "" {
		if _, err := os.Stat(m.images.Path(rec.Name)); err != nil {
			return true, fmt.Sprintf("image file: %v", err)
		}
	}
	if h.fence != "" {
		return true, fmt.Sprintf("the volume takes no more writes: %s; unstage it and stage it again once the device is back", h.fence)
	}
	if h.damage != "" {
		return true, fmt.Sprintf("damage found while serving, changes are refused (check the unstaged volume with csi-fat fsck): %s", h.damage)
	}
	if h.failure != "" {
		return true, fmt.Sprintf("the mount went read-only after an I/O error (errors=remount-ro): %s", h.failure)
	}
	if h.ioErrors > 0 {
		return true, fmt.Sprintf("%d device I/O errors, the last: %s", h.ioErrors, h.lastIOError)
	}
	if h.gone != "" {
		return true, h.gone
	}
	if h.lost != "" {
		return true, h.lost
	}
	if err := hostmount.Healthy(path); err != nil {
		return true, fmt.Sprintf("mount at %s: %v", path, err)
	}
	if h.checkDamage != "" {
		return true, h.checkDamage
	}
	return false, "volume is served and its device answers"
}

// NodeGetVolumeStats reports bytes, inodes and the volume's condition.
func (s *Service) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is missing")
	}
	if req.GetVolumePath() == "" {
		return nil, invalid("volume path is missing")
	}
	rec, err := s.m.nodeVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	path := filepath.Clean(req.GetVolumePath())
	m := s.m
	m.store.Lock()
	st := m.store.Staged[rec.Name]
	pub := m.store.Published[path]
	sv := m.served[rec.Name]
	m.store.Unlock()
	atStaging := st != nil && st.Path == path
	atTarget := pub != nil && pub.Name == rec.Name
	if !atStaging && !atTarget {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged or published at %s", rec.ID, path)
	}
	if sv == nil {
		return &csi.NodeGetVolumeStatsResponse{VolumeCondition: &csi.VolumeCondition{
			Abnormal: true, Message: "volume is recorded as staged but not served (is its device attached?)",
		}}, nil
	}
	h := sv.health(true, true)
	abnormal, msg := m.condition(rec, h, path)
	vs, err := h.stats, h.statsErr
	if err == nil && vs == nil {
		err = errors.New("no statfs figures")
	}
	if err != nil {
		// Without numbers the condition still tells the story.
		return &csi.NodeGetVolumeStatsResponse{VolumeCondition: &csi.VolumeCondition{
			Abnormal: true, Message: fmt.Sprintf("%s; reading the volume: %v", msg, err),
		}}, nil
	}
	return &csi.NodeGetVolumeStatsResponse{
		Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: vs.TotalBytes, Available: vs.AvailableBytes, Used: vs.UsedBytes},
			{Unit: csi.VolumeUsage_INODES, Total: vs.TotalFiles, Available: vs.FreeFiles, Used: vs.UsedFiles},
		},
		VolumeCondition: &csi.VolumeCondition{Abnormal: abnormal, Message: msg},
	}, nil
}
