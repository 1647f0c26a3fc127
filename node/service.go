package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/serving"
	"github.com/csi-fat/csi-fat/node/volume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Service is the CSI node service.
type Service struct {
	csi.UnimplementedNodeServer
	m *Manager
}

// NewService serves the manager's volumes.
func NewService(m *Manager) *Service { return &Service{m: m} }

var _ csi.NodeServer = (*Service)(nil)

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// checkPath refuses what kubelet never sends: an empty or relative path, or one with NUL.
func checkPath(what, p string) error {
	switch {
	case p == "":
		return invalid("%s is missing", what)
	case !filepath.IsAbs(p):
		return invalid("%s %q is not absolute", what, p)
	case slices.Contains([]byte(p), 0):
		return invalid("%s holds a NUL byte", what)
	}
	return nil
}

// NodeStageVolume serves the volume through FUSE at the staging path.
func (s *Service) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is missing")
	}
	if err := s.m.checkRequestPath("staging target path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	if err := CheckCapability(req.GetVolumeCapability()); err != nil {
		return nil, invalid("%v", err)
	}
	id, err := volume.OwnID(req.GetVolumeId(), s.m.cfg.NodeID)
	if err != nil {
		return nil, err
	}
	unlock, err := s.m.locks.Take(id.Name, "NodeStageVolume")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.m.checkOtherMounts("staging target path", req.GetStagingTargetPath(), id.Name, ""); err != nil {
		return nil, err
	}
	rec, err := s.m.store.Record(id)
	if err != nil {
		return nil, err
	}
	mnt := req.GetVolumeCapability().GetMount()
	want := volume.StageRecord{
		Path:       filepath.Clean(req.GetStagingTargetPath()),
		ReadOnly:   readOnlyMode(req.GetVolumeCapability()),
		MountFlags: rec.Params.StageFlags(mnt.GetMountFlags()),
		MountGroup: mnt.GetVolumeMountGroup(),
		AccessMode: int32(req.GetVolumeCapability().GetAccessMode().GetMode()),
	}
	s.m.store.Lock()
	have := s.m.store.Staged[id.Name]
	served := s.m.served[id.Name]
	s.m.store.Unlock()
	if have != nil {
		if have.Path != want.Path {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is staged at %s, not %s", id, have.Path, want.Path)
		}
		if !sameStage(have, &want) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is staged at %s with another capability", id, want.Path)
		}
		if served != nil && !served.gone() {
			return &csi.NodeStageVolumeResponse{}, nil
		}
		// Recorded but not served (its device was away at restore, or the mount was taken away
		// from outside): serve it again.
	}
	if err := s.m.stage(rec, &want); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func sameStage(a, b *volume.StageRecord) bool {
	return a.Path == b.Path && a.ReadOnly == b.ReadOnly && a.MountGroup == b.MountGroup &&
		a.AccessMode == b.AccessMode && slices.Equal(a.MountFlags, b.MountFlags)
}

// stage mounts the volume at st.Path and records it. The caller holds the volume's lock.
func (m *Manager) stage(rec volume.Record, st *volume.StageRecord) error {
	opts, err := serving.MountOptions(st.MountFlags, st.MountGroup, st.ReadOnly)
	if err != nil {
		return invalid("%v", err)
	}
	devPath, err := m.devicePath(rec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(st.Path, 0o750); err != nil && !isCorrupted(st.Path) {
		return status.Errorf(codes.Internal, "staging path: %v", err)
	}
	m.store.Lock()
	old := m.served[rec.Name]
	delete(m.served, rec.Name)
	m.store.Unlock()
	if old != nil {
		if err := old.stop(); err != nil {
			klog.ErrorS(err, "stopping the previous server of a volume staged again", "volume", rec.ID)
		}
	}
	// Whatever is mounted here now is left over: a dead FUSE mount of an earlier run of the
	// plugin, or of a mount that went away.
	if err := m.mounts.DetachAll(st.Path); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	var sv *servedVolume
	st.Mounter = nil
	if m.cfg.Mounter.OutOfProcess() {
		if sv, err = m.serveInMounter(rec, devPath, st); err != nil {
			return err
		}
		opts.ReadOnly = opts.ReadOnly || sv.damage != ""
	} else {
		forceReadOnly, damage, err := m.checkBeforeServing(m.stagingOpener(rec, devPath), rec, devPath, opts.ReadOnly)
		if err != nil {
			return err
		}
		if forceReadOnly && !opts.ReadOnly {
			if opts, err = serving.MountOptions(st.MountFlags, st.MountGroup, true); err != nil {
				return invalid("%v", err)
			}
		}
		sv, err = m.serveVolume(rec, devPath, st.Path, opts)
		if err != nil {
			return status.Errorf(claimCode(err, codes.Internal), "serve volume %s at %s: %v", rec.ID, st.Path, err)
		}
		sv.damage = damage
	}
	if !opts.ReadOnly {
		m.growToImage(rec, st, sv)
	}
	m.store.Lock()
	defer m.store.Unlock()
	m.served[rec.Name] = sv
	m.store.Staged[rec.Name] = st
	if err := m.saveLocked(); err != nil {
		delete(m.served, rec.Name)
		delete(m.store.Staged, rec.Name)
		if serr := sv.stop(); serr != nil {
			klog.ErrorS(serr, "unmounting after failing to record it", "volume", rec.ID)
		}
		return err
	}
	if sv.held != nil {
		go m.supervise(sv)
	}
	klog.InfoS("staged volume", "volume", rec.ID, "path", st.Path, "device", devPath, "readOnly", opts.ReadOnly)
	return nil
}

// isCorrupted tells whether path is a dead mount.
func isCorrupted(path string) bool {
	_, err := os.Stat(path)
	return err != nil && !errors.Is(err, os.ErrNotExist) && hostmount.Healthy(path) != nil
}

// NodeUnstageVolume unmounts the staging path once nothing is published from it, writing
// everything back and marking the file system clean.
func (s *Service) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is missing")
	}
	if err := s.m.checkRequestPath("staging target path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	id, err := volume.OwnID(req.GetVolumeId(), s.m.cfg.NodeID)
	if err != nil {
		return nil, err
	}
	unlock, err := s.m.locks.Take(id.Name, "NodeUnstageVolume")
	if err != nil {
		return nil, err
	}
	defer unlock()
	path := filepath.Clean(req.GetStagingTargetPath())
	m := s.m
	_, missing := m.store.Record(id)
	m.store.Lock()
	st := m.store.Staged[id.Name]
	targets := m.store.TargetsOf(id.Name)
	sv := m.served[id.Name]
	m.store.Unlock()
	if missing != nil {
		st = nil // another pool's volume of the same name is not this one
	}
	if st == nil || st.Path != path {
		// Not staged here: only a dead mount can be left to clean.
		if isCorrupted(path) {
			if err := m.mounts.DetachAll(path); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
			return &csi.NodeUnstageVolumeResponse{}, nil
		}
		if missing != nil {
			return nil, missing // the spec's answer for a volume that does not exist
		}
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if len(targets) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still published at %v", id, targets)
	}
	if sv != nil {
		if err := sv.stop(); err != nil {
			if sv.gone() {
				// The mount is gone but writing back failed: nothing more can be done for it.
				klog.ErrorS(err, "unstaging", "volume", id.String())
			} else {
				return nil, status.Errorf(codes.Internal, "unstage %s: %v", id, err)
			}
		}
	} else if err := m.mounts.DetachAll(path); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	m.store.Lock()
	defer m.store.Unlock()
	delete(m.served, id.Name)
	delete(m.store.Staged, id.Name)
	if err := m.saveLocked(); err != nil {
		return nil, err
	}
	klog.InfoS("unstaged volume", "volume", id.String(), "path", path)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume bind-mounts the staged volume at the target path.
func (s *Service) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is missing")
	}
	if err := s.m.checkRequestPath("target path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	if err := CheckCapability(req.GetVolumeCapability()); err != nil {
		return nil, invalid("%v", err)
	}
	if volume.IsEphemeral(req.GetVolumeContext()) {
		return s.publishEphemeral(ctx, req)
	}
	if err := checkPath("staging target path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	if overlaps(req.GetTargetPath(), req.GetStagingTargetPath()) {
		return nil, invalid("target path %s overlaps the staging target path %s", req.GetTargetPath(), req.GetStagingTargetPath())
	}
	id, err := volume.OwnID(req.GetVolumeId(), s.m.cfg.NodeID)
	if err != nil {
		return nil, err
	}
	unlock, err := s.m.locks.Take(id.Name, "NodePublishVolume")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.m.checkOtherMounts("target path", req.GetTargetPath(), "", filepath.Clean(req.GetTargetPath())); err != nil {
		return nil, err
	}
	rec, err := s.m.store.Record(id)
	if err != nil {
		return nil, err
	}
	m := s.m
	target := filepath.Clean(req.GetTargetPath())
	staging := filepath.Clean(req.GetStagingTargetPath())
	readOnly := req.GetReadonly() || readOnlyMode(req.GetVolumeCapability())
	mode := req.GetVolumeCapability().GetAccessMode().GetMode()

	m.store.Lock()
	st := m.store.Staged[id.Name]
	have := m.store.Published[target]
	others := m.store.TargetsOf(id.Name)
	sv := m.served[id.Name]
	m.store.Unlock()
	if st == nil || st.Path != staging {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", id, staging)
	}
	if sv != nil && sv.mounter() != nil && sv.gone() {
		// Its mounter died (killed, out of memory, a panic): kubelet may never stage it again,
		// so serve it again here, after the check and repair of every staging.
		klog.InfoS("serving again a volume whose mounter is gone", "volume", id.String(), "why", sv.mounter().EndedWhy())
		again := *st
		if err := m.stage(rec, &again); err != nil {
			return nil, err
		}
		m.store.Lock()
		sv = m.served[id.Name]
		m.store.Unlock()
	}
	if sv == nil || sv.gone() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is staged at %s but not served; stage it again", id, staging)
	}
	if have != nil {
		if have.Name != id.Name {
			return nil, status.Errorf(codes.FailedPrecondition, "target %s holds another volume", target)
		}
		if have.ReadOnly != readOnly {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is published at %s with readOnly=%v", id, target, have.ReadOnly)
		}
		if int32(mode) != st.AccessMode {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s is published at %s with access mode %s", id, target, csi.VolumeCapability_AccessMode_Mode(st.AccessMode))
		}
		if hostmount.Healthy(target) == nil {
			return &csi.NodePublishVolumeResponse{}, nil
		}
	}
	// The access mode is the volume's on this node, fixed at staging: a publish that asks for
	// another one is refused, so every target of a volume has the staging's mode.
	if int32(mode) != st.AccessMode {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is staged with access mode %s; it cannot be published with %s",
			id, csi.VolumeCapability_AccessMode_Mode(st.AccessMode), mode)
	}
	if !multiTarget(mode) && len(others) > 0 && !(len(others) == 1 && others[0] == target) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s has access mode %s, which allows one target, and is published at %v", id, mode, others)
	}
	if st.ReadOnly && !readOnly {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is staged read-only; it cannot be published read-write", id)
	}
	if err := m.publish(id.String(), id.Name, staging, target, readOnly); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// publish bind-mounts staging at target and records it. id is the volume's ID, name its name.
func (m *Manager) publish(id, name, staging, target string, readOnly bool) error {
	if err := os.MkdirAll(target, 0o750); err != nil && !isCorrupted(target) {
		return status.Errorf(codes.Internal, "target path: %v", err)
	}
	if err := m.mounts.DetachAll(target); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := m.mounts.Bind(staging, target, readOnly); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	m.store.Lock()
	defer m.store.Unlock()
	m.store.Published[target] = &volume.PublishRecord{Name: name, ReadOnly: readOnly}
	if err := m.saveLocked(); err != nil {
		delete(m.store.Published, target)
		m.mounts.Unmount(target)
		return err
	}
	klog.InfoS("published volume", "volume", id, "target", target, "readOnly", readOnly)
	return nil
}

// NodeUnpublishVolume writes the volume back, unmounts the target and removes it.
func (s *Service) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is missing")
	}
	if err := s.m.checkRequestPath("target path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	if s.m.isStagingPath(req.GetTargetPath()) {
		// Unmounting there would take a staged volume away from under its targets.
		return nil, invalid("target path %s overlaps where a volume is staged", req.GetTargetPath())
	}
	if _, err := volume.ParseID(req.GetVolumeId()); err != nil || s.m.isEphemeralID(req.GetVolumeId()) {
		// An inline volume's ID, the CO's own, or an ID of none.
		return s.unpublishEphemeral(req.GetVolumeId(), filepath.Clean(req.GetTargetPath()))
	}
	id, err := volume.OwnID(req.GetVolumeId(), s.m.cfg.NodeID)
	if err != nil {
		return nil, err
	}
	unlock, err := s.m.locks.Take(id.Name, "NodeUnpublishVolume")
	if err != nil {
		return nil, err
	}
	defer unlock()
	m := s.m
	target := filepath.Clean(req.GetTargetPath())
	_, missing := m.store.Record(id)
	exists := missing == nil
	m.store.Lock()
	pub := m.store.Published[target]
	sv := m.served[id.Name]
	m.store.Unlock()
	if pub != nil && !exists {
		// The target holds a volume of this name under another ID (another pool's): not this one.
		return nil, missing
	}
	if pub != nil && pub.Name != id.Name {
		return nil, status.Errorf(codes.FailedPrecondition, "target %s holds volume %s, not %s", target, pub.Name, id.Name)
	}
	if pub == nil && !exists {
		if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) {
			return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
		}
	}
	if err := m.unbind(id.String(), target, pub, sv); err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// unbind writes the volume back, unmounts the target, removes it and drops its record (pub, when
// there is one). volume names the volume in errors and logs. The caller holds the volume's lock.
func (m *Manager) unbind(volume, target string, pub *volume.PublishRecord, sv *servedVolume) error {
	if pub != nil && sv != nil && !sv.gone() {
		if err := sv.sync(); err != nil {
			klog.ErrorS(err, "writing back before unpublishing", "volume", volume)
		}
	}
	mounted, err := m.mounts.IsMountPoint(target)
	if err != nil {
		return status.Errorf(codes.Internal, "unpublish %s: %v", volume, err)
	}
	if mounted {
		if err := m.mounts.Unmount(target); err != nil {
			return status.Errorf(codes.Internal, "unpublish %s: %v", volume, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "unpublish %s: remove target path: %v", volume, err)
	}
	if pub != nil {
		m.store.Lock()
		defer m.store.Unlock()
		delete(m.store.Published, target)
		if err := m.saveLocked(); err != nil {
			return err
		}
		klog.InfoS("unpublished volume", "volume", volume, "target", target)
	}
	return nil
}

// NodeGetInfo names the node, its topology and how many volumes it takes.
func (s *Service) NodeGetInfo(ctx context.Context, req *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             s.m.NodeID(),
		MaxVolumesPerNode:  int64(s.m.MaxVolumes()),
		AccessibleTopology: &csi.Topology{Segments: map[string]string{s.m.TopologyKey(): s.m.NodeID()}},
	}, nil
}

// volumeConditionCapability is VOLUME_CONDITION, which kubelet asks for before it reports
// volume health.
const volumeConditionCapability = csi.NodeServiceCapability_RPC_VOLUME_CONDITION

// NodeGetCapabilities lists what the node service does.
func (s *Service) NodeGetCapabilities(ctx context.Context, req *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, c := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		volumeConditionCapability,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}},
		})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}
