package node

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/imagepool"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/volume"
)

// ExpandVolume grows a volume's image to at least required bytes (at most limit; 0: none) for
// ControllerExpandVolume and returns its size; the file system grows at NodeExpandVolume. A
// volume at least that large already is left as it is. Refused before anything changes: a USB
// volume (a device cannot grow) and a size past what the file system can grow to are
// OutOfRange, growth the pool has no room for is ResourceExhausted.
func (m *Manager) ExpandVolume(ctx context.Context, volumeID string, required, limit int64) (int64, error) {
	id, err := volume.OwnID(volumeID, m.cfg.NodeID)
	if err != nil {
		return 0, err
	}
	unlock, err := m.locks.Take(id.Name, "ControllerExpandVolume")
	if err != nil {
		return 0, err
	}
	defer unlock()
	rec, err := m.store.Record(id)
	if err != nil {
		return 0, err
	}
	switch {
	case limit != 0 && rec.Size > limit:
		return 0, status.Errorf(codes.OutOfRange, "volume %s has %d bytes, more than the limit %d: volumes do not shrink", rec.ID, rec.Size, limit)
	case required <= rec.Size:
		return rec.Size, nil
	case rec.Partition != "":
		return 0, status.Errorf(codes.OutOfRange, "volume %s is partition %s of removable medium %s, of %d bytes, and cannot grow to %d: a partition's size is fixed", rec.ID, rec.Partition, rec.Device, rec.Size, required)
	case rec.Device != "":
		return 0, status.Errorf(codes.OutOfRange, "volume %s is removable medium %s of %d bytes and cannot grow to %d: a device's size is fixed", rec.ID, rec.Device, rec.Size, required)
	}
	if required > rec.MaxSize {
		return 0, status.Errorf(codes.OutOfRange, "volume %s can grow to at most %d bytes, %d asked: its FATs were made for that (StorageClass parameter %s, else room for growth to %dx, see docs/driver.md), and the FAT type cannot change in place",
			rec.ID, max(rec.MaxSize, rec.Size), required, volume.ParamMaxSize, imagepool.DefaultGrowth)
	}
	within := rec.MaxSize
	if limit != 0 {
		within = min(within, limit)
	}
	size, ok := imagepool.AlignedSize(required, within)
	if !ok {
		return 0, status.Errorf(codes.OutOfRange, "no whole number of 512-byte sectors lies between %d and %d bytes", required, within)
	}
	m.provision.Lock()
	defer m.provision.Unlock()
	avail, err := m.imageCapacity()
	if err != nil {
		return 0, status.Error(codes.Internal, err.Error())
	}
	if size-rec.Size > avail {
		return 0, status.Errorf(codes.ResourceExhausted, "image pool %s has room for %d more bytes, volume %s needs %d more", m.images.Dir, avail, rec.ID, size-rec.Size)
	}
	if err := imagepool.GrowFile(m.images.Path(rec.Name), size); err != nil {
		return 0, status.Errorf(codes.Internal, "volume %s: %v", rec.ID, err)
	}
	m.store.Lock()
	defer m.store.Unlock()
	v := m.store.Volumes[id.Name]
	old := v.Size
	v.Size = size
	if err := m.saveLocked(); err != nil {
		v.Size = old
		return 0, err
	}
	klog.InfoS("expanded volume", "volume", rec.ID, "from", old, "size", size)
	return size, nil
}

// NodeExpandVolume grows a staged volume's file system while it is in use.
func (s *Service) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is missing")
	}
	if req.GetVolumePath() == "" {
		return nil, invalid("volume path is missing")
	}
	if c := req.GetVolumeCapability(); c != nil {
		if err := CheckCapability(c); err != nil {
			return nil, invalid("%v", err)
		}
	}
	required := req.GetCapacityRange().GetRequiredBytes()
	if required < 0 || req.GetCapacityRange().GetLimitBytes() < 0 {
		return nil, invalid("capacity range %d..%d is negative", required, req.GetCapacityRange().GetLimitBytes())
	}
	n, err := s.m.NodeExpand(ctx, req.GetVolumeId(), req.GetVolumePath(), required)
	if err != nil {
		return nil, err
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: n}, nil
}

// NodeExpand grows the file system of a staged volume, while it is in use, to its image's size
// for NodeExpandVolume, and returns the file system's size. The staging's record keeps it. When
// more bytes are asked than the image has, the image grows first, as ControllerExpandVolume
// grows it (ExpandVolume): the controller service does not claim EXPAND_VOLUME, so in
// Kubernetes the resizer only records the claim's new size and the volume grows here, on its
// own node (docs/driver.md, "Sidecars").
func (m *Manager) NodeExpand(ctx context.Context, volumeID, volumePath string, required int64) (int64, error) {
	rec, err := m.nodeVolume(volumeID)
	if err != nil {
		return 0, err
	}
	path := filepath.Clean(volumePath)
	// at tells whether the volume is staged or published at path, and what serves it.
	at := func() (*servedVolume, bool) {
		m.store.Lock()
		defer m.store.Unlock()
		st := m.store.Staged[rec.Name]
		pub := m.store.Published[path]
		return m.served[rec.Name], (st != nil && st.Path == path) || (pub != nil && pub.Name == rec.Name)
	}
	if _, ok := at(); !ok {
		return 0, status.Errorf(codes.NotFound, "volume %s is not staged or published at %s", rec.ID, path)
	}
	if _, ephemeral := m.ephemeralVolume(volumeID); required > rec.Size && !ephemeral {
		// Takes the volume's lock itself, so before NodeExpand takes it.
		if _, err := m.ExpandVolume(ctx, volumeID, required, 0); err != nil {
			return 0, err
		}
		if rec, err = m.nodeVolume(volumeID); err != nil {
			return 0, err
		}
	}
	unlock, err := m.locks.Take(rec.Name, "NodeExpandVolume")
	if err != nil {
		return 0, err
	}
	defer unlock()
	sv, ok := at()
	if !ok {
		return 0, status.Errorf(codes.NotFound, "volume %s is not staged or published at %s", rec.ID, path)
	}
	if required > rec.Size {
		return 0, status.Errorf(codes.OutOfRange, "volume %s has %d bytes, %d asked", rec.ID, rec.Size, required)
	}
	if rec.Device != "" {
		return rec.Size, nil // a device's file system fills it already; devices do not grow
	}
	if sv == nil || sv.gone() {
		return 0, status.Errorf(codes.FailedPrecondition, "volume %s at %s is not served; stage or publish it again", rec.ID, path)
	}
	n, grew, err := sv.grow()
	var remote *protocol.RemoteError
	switch {
	case errors.As(err, &remote) && remote.Code == protocol.CodeGrowLimit:
		return 0, status.Errorf(codes.OutOfRange, "volume %s: %v", rec.ID, err)
	case errors.Is(err, syscall.EROFS) || errors.As(err, &remote) && remote.Code == protocol.CodeReadOnly:
		return 0, status.Errorf(codes.FailedPrecondition, "volume %s is served read-only, so its file system cannot grow: %v", rec.ID, err)
	case err != nil:
		return 0, status.Errorf(codes.Internal, "grow the file system of volume %s: %v", rec.ID, err)
	}
	m.store.Lock()
	defer m.store.Unlock()
	if st := m.store.Staged[rec.Name]; st != nil && (grew || st.Size != 0) && st.Size != n {
		st.Size = n
		if err := m.saveLocked(); err != nil {
			return 0, err
		}
	}
	if grew {
		klog.InfoS("grew the file system", "volume", rec.ID, "bytes", n)
	}
	return n, nil
}

// growToImage grows a freshly served image volume's file system to its image when the image is
// larger and the FATs have the room: a volume restored or cloned into a larger size, or one whose
// image ControllerExpandVolume grew while it was not staged. Kubelet calls NodeExpandVolume only
// for a claim it resized, so without this a larger restore would keep its source's size for
// good. A failure leaves the file system as it was: the volume is served all the same.
func (m *Manager) growToImage(rec volume.Record, st *volume.StageRecord, sv *servedVolume) {
	if rec.Device != "" || rec.MaxSize < rec.Size {
		return
	}
	n, grew, err := sv.grow()
	if err != nil {
		klog.ErrorS(err, "could not grow the file system to its image at staging", "volume", rec.ID)
		return
	}
	if grew {
		st.Size = n
		klog.InfoS("grew the file system to its image at staging", "volume", rec.ID, "bytes", n)
	}
}

// grow grows the served file system to its device's size now; it tells whether it grew.
func (sv *servedVolume) grow() (int64, bool, error) {
	if p := sv.mounter(); p != nil {
		if p.IsGone() {
			return 0, false, errors.New(p.EndedWhy())
		}
		resp, err := p.Call(&protocol.Request{Op: protocol.OpGrow}, mounters.ServeTimeout)
		if err != nil {
			return 0, false, err
		}
		if resp.Grow == nil {
			return 0, false, errors.New("mounter answered grow without the new size")
		}
		return resp.Grow.Bytes, resp.Grow.Grew, nil
	}
	return sv.local.Grow()
}
