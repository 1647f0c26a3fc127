package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/imagepool"
	"github.com/csi-fat/csi-fat/node/volume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// CSI ephemeral inline volumes: a pod names the driver and volumeAttributes in its own spec, and
// kubelet calls NodePublishVolume with the volume context key volume.EphemeralContextKey set and no
// staging. Each is a fresh image volume of its own, made, served and bound at the target by that
// call and removed entirely by NodeUnpublishVolume. Between the two it is recorded like any
// staged and published volume (its staging path inside the state directory, where no request
// may reach), so a restart of the plugin serves it again like the others.

// ephemeralDir is the state directory's subdirectory where inline volumes are served.
const ephemeralDir = "ephemeral"

// ephemeralStaging is where the inline volume of this name is served.
func (m *Manager) ephemeralStaging(name string) string {
	return filepath.Join(m.cfg.StateDir, ephemeralDir, name)
}

// ephemeralVolume finds the inline volume of a CO's volume ID.
func (m *Manager) ephemeralVolume(volumeID string) (volume.Record, bool) {
	name := volume.EphemeralName(volumeID)
	m.store.Lock()
	defer m.store.Unlock()
	v, ok := m.store.Volumes[name]
	if !ok || !v.Ephemeral || v.ID != volumeID {
		return volume.Record{}, false
	}
	return *v, true
}

// nodeVolume is the record of the volume a node call names: an inline volume by the CO's ID,
// else a volume of this driver's (Volume).
func (m *Manager) nodeVolume(volumeID string) (volume.Record, error) {
	if rec, ok := m.ephemeralVolume(volumeID); ok {
		return rec, nil
	}
	return m.Volume(volumeID)
}

// publishEphemeral makes, serves and binds an inline volume; the request's target path and
// capability are checked.
func (s *Service) publishEphemeral(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	m := s.m
	volumeID := req.GetVolumeId()
	if req.GetStagingTargetPath() != "" {
		return nil, invalid("inline ephemeral volume %s: not staged, yet a staging target path %s is given", volumeID, req.GetStagingTargetPath())
	}
	size, params, err := volume.ParseEphemeral(req.GetVolumeContext())
	if err != nil {
		return nil, invalid("inline ephemeral volume %s: %v", volumeID, err)
	}
	name := volume.EphemeralName(volumeID)
	target := filepath.Clean(req.GetTargetPath())
	if err := m.checkOtherMounts("target path", target, "", target); err != nil {
		return nil, err
	}
	unlock, err := m.locks.Take(name, "NodePublishVolume")
	if err != nil {
		return nil, err
	}
	defer unlock()
	c := req.GetVolumeCapability()
	readOnly := req.GetReadonly() || readOnlyMode(c)
	want := volume.StageRecord{
		Path:       m.ephemeralStaging(name),
		ReadOnly:   readOnlyMode(c),
		MountFlags: params.StageFlags(c.GetMount().GetMountFlags()),
		MountGroup: c.GetMount().GetVolumeMountGroup(),
		AccessMode: int32(c.GetAccessMode().GetMode()),
	}
	wantSize, err := imagepool.ChooseSize(size, 0, params)
	if err != nil {
		return nil, err
	}

	m.store.Lock()
	existing := m.store.Volumes[name]
	var rec volume.Record
	if existing != nil {
		rec = *existing
	}
	st := m.store.Staged[name]
	pub := m.store.Published[target]
	others := m.store.TargetsOf(name)
	sv := m.served[name]
	m.store.Unlock()
	if existing != nil && (!rec.Ephemeral || rec.ID != volumeID) {
		return nil, status.Errorf(codes.AlreadyExists, "inline ephemeral volume %s: its name %s is taken by volume %s", volumeID, name, rec.ID)
	}
	if pub != nil && pub.Name != name {
		return nil, status.Errorf(codes.FailedPrecondition, "target %s holds volume %s", target, pub.Name)
	}
	if existing != nil {
		if rec.Params != params || rec.Size != wantSize {
			return nil, status.Errorf(codes.AlreadyExists, "inline ephemeral volume %s exists with other attributes (%d bytes, %v)", volumeID, rec.Size, rec.Params.Map())
		}
		if st != nil && !sameStage(st, &want) {
			return nil, status.Errorf(codes.AlreadyExists, "inline ephemeral volume %s is served with another capability", volumeID)
		}
		for _, t := range others {
			if t != target {
				// An inline volume belongs to one pod's volume: one target.
				return nil, status.Errorf(codes.FailedPrecondition, "inline ephemeral volume %s is published at %s", volumeID, t)
			}
		}
		if pub != nil {
			if pub.ReadOnly != readOnly {
				return nil, status.Errorf(codes.AlreadyExists, "inline ephemeral volume %s is published at %s with readOnly=%v", volumeID, target, pub.ReadOnly)
			}
			if sv != nil && !sv.gone() && hostmount.Healthy(target) == nil {
				return &csi.NodePublishVolumeResponse{}, nil
			}
		}
		// Served again (after a restart) or bound again where the bind went away.
		if err := s.serveEphemeral(rec, &want, st, sv, target, readOnly); err != nil {
			return nil, err
		}
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if rec, err = m.makeEphemeral(volumeID, name, wantSize, params); err != nil {
		return nil, err
	}
	if err := s.serveEphemeral(rec, &want, nil, nil, target, readOnly); err != nil {
		// Nothing was handed out: take it all down, so that a retry starts afresh.
		if rerr := m.removeEphemeral(rec); rerr != nil {
			klog.ErrorS(rerr, "removing an inline ephemeral volume that failed to publish", "volume", volumeID)
		}
		return nil, err
	}
	klog.InfoS("made inline ephemeral volume", "volume", volumeID, "name", name, "size", rec.Size, "target", target)
	return &csi.NodePublishVolumeResponse{}, nil
}

// serveEphemeral stages the inline volume where it is served, unless it is served there
// already, and binds it at the target.
func (s *Service) serveEphemeral(rec volume.Record, want, st *volume.StageRecord, sv *servedVolume, target string, readOnly bool) error {
	m := s.m
	if st == nil || sv == nil || sv.gone() {
		if err := m.stage(rec, want); err != nil {
			return err
		}
	}
	return m.publish(rec.ID, rec.Name, want.Path, target, readOnly)
}

// makeEphemeral makes an inline volume's image and records it, within the pool's capacity and
// the node's volume bound as CreateVolume is.
func (m *Manager) makeEphemeral(volumeID, name string, size int64, params volume.Params) (volume.Record, error) {
	m.provision.Lock()
	defer m.provision.Unlock()
	m.store.Lock()
	count := len(m.store.Volumes)
	m.store.Unlock()
	if max := m.cfg.MaxVolumes; max > 0 && count >= max {
		return volume.Record{}, status.Errorf(codes.ResourceExhausted, "inline ephemeral volume %s: node %s has %d volumes, its maximum", volumeID, m.cfg.NodeID, count)
	}
	avail, err := m.imageCapacity()
	if err != nil {
		return volume.Record{}, status.Errorf(codes.Internal, "inline ephemeral volume %s: %v", volumeID, err)
	}
	if size > avail {
		return volume.Record{}, status.Errorf(codes.ResourceExhausted, "inline ephemeral volume %s: image pool %s can make volumes up to %d bytes, %d asked", volumeID, m.images.Dir, avail, size)
	}
	fixed := params
	fixed.MaxSize = size // inline volumes never grow: mkfs.fat's layout, no room in the FATs
	if err := m.images.Create(name, size, fixed); err != nil {
		return volume.Record{}, status.Errorf(codes.Internal, "inline ephemeral volume %s: %v", volumeID, err)
	}
	rec := volume.Record{ID: volumeID, Name: name, Size: size, Params: params, Created: time.Now().UTC(), Ephemeral: true}
	m.store.Lock()
	defer m.store.Unlock()
	m.store.Volumes[name] = &rec
	if err := m.saveLocked(); err != nil {
		delete(m.store.Volumes, name)
		m.images.Remove(name)
		return volume.Record{}, err
	}
	return rec, nil
}

// unpublishEphemeral unbinds an inline volume from the target and, with that its last target,
// removes the volume: unmounted, written back, its image and records gone. volumeID is not of
// this driver's form (or is an inline volume's): with no inline volume of that ID, a target that
// no record holds is cleaned up as a leftover (a removal already done, or a publish that failed),
// and otherwise the volume does not exist.
func (s *Service) unpublishEphemeral(volumeID, target string) (*csi.NodeUnpublishVolumeResponse, error) {
	m := s.m
	name := volume.EphemeralName(volumeID)
	unlock, err := m.locks.Take(name, "NodeUnpublishVolume")
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, ok := m.ephemeralVolume(volumeID)
	m.store.Lock()
	pub := m.store.Published[target]
	sv := m.served[name]
	m.store.Unlock()
	if !ok {
		if _, err := os.Lstat(target); pub != nil || errors.Is(err, os.ErrNotExist) {
			return nil, status.Errorf(codes.NotFound, "volume %q does not exist", volumeID)
		}
		if err := m.unbind(volumeID, target, nil, nil); err != nil {
			return nil, err
		}
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if pub != nil && pub.Name != rec.Name {
		return nil, status.Errorf(codes.FailedPrecondition, "target %s holds volume %s, not inline ephemeral volume %s", target, pub.Name, rec.ID)
	}
	if err := m.unbind(rec.ID, target, pub, sv); err != nil {
		return nil, err
	}
	m.store.Lock()
	left := m.store.TargetsOf(rec.Name)
	m.store.Unlock()
	if len(left) > 0 {
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if err := m.removeEphemeral(rec); err != nil {
		return nil, err
	}
	klog.InfoS("removed inline ephemeral volume", "volume", rec.ID, "name", rec.Name, "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// removeEphemeral takes an inline volume with no targets down: stops serving it, removes its
// staging directory, its image and its records. The caller holds the volume's lock.
func (m *Manager) removeEphemeral(rec volume.Record) error {
	staging := m.ephemeralStaging(rec.Name)
	m.store.Lock()
	sv := m.served[rec.Name]
	m.store.Unlock()
	if sv != nil {
		if err := sv.stop(); err != nil && !sv.gone() {
			return status.Errorf(codes.Internal, "remove inline ephemeral volume %s: %v", rec.ID, err)
		}
	}
	if err := m.mounts.DetachAll(staging); err != nil {
		return status.Errorf(codes.Internal, "remove inline ephemeral volume %s: %v", rec.ID, err)
	}
	if err := os.Remove(staging); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "remove inline ephemeral volume %s: %v", rec.ID, err)
	}
	m.store.Lock()
	delete(m.served, rec.Name)
	delete(m.store.Staged, rec.Name)
	err := m.saveLocked()
	m.store.Unlock()
	if err != nil {
		return err
	}
	// The image goes after the staging record, so a crash between the two leaves a volume
	// record with nothing served, which RemoveOrphanedEphemeral takes down at the next start.
	if err := m.images.Remove(rec.Name); err != nil {
		return status.Errorf(codes.Internal, "remove inline ephemeral volume %s: %v", rec.ID, err)
	}
	m.store.Lock()
	defer m.store.Unlock()
	delete(m.store.Volumes, rec.Name)
	return m.saveLocked()
}

// RemoveOrphanedEphemeral removes the inline volumes that no target holds any more: a crash
// between making one and binding it, or between unbinding and removing it, leaves them. Call it
// after Restore; kubelet's retried NodePublishVolume makes a missing one afresh.
func (m *Manager) RemoveOrphanedEphemeral() {
	m.store.Lock()
	var orphans []volume.Record
	for _, v := range m.store.Volumes {
		if v.Ephemeral && len(m.store.TargetsOf(v.Name)) == 0 {
			orphans = append(orphans, *v)
		}
	}
	m.store.Unlock()
	for _, rec := range orphans {
		unlock, err := m.locks.Take(rec.Name, "RemoveOrphanedEphemeral")
		if err != nil {
			continue // a call is at it
		}
		if err := m.removeEphemeral(rec); err != nil {
			klog.ErrorS(err, "removing an inline ephemeral volume no target holds", "volume", rec.ID)
		} else {
			klog.InfoS("removed an inline ephemeral volume no target holds", "volume", rec.ID, "name", rec.Name)
		}
		unlock()
	}
}

// isEphemeralID tells whether an inline volume has this ID.
func (m *Manager) isEphemeralID(volumeID string) bool {
	_, ok := m.ephemeralVolume(volumeID)
	return ok
}
