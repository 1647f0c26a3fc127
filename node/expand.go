package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Growth room. A FAT volume grows in place only as far as its FATs have entries (they cannot
// move under a mounted volume) and its type allows (docs/engine.md). With maxSize the image is
// formatted for it (mkfs.Options.MaxSize). Without, it gets mkfs.fat's layout for its size with
// FATs for a default room: up to defaultGrowth times the size, as far as the type allows at that
// cluster size, and at most defaultRoomFATBytes more FAT per copy (memory too: the engine holds
// the FAT). So allowVolumeExpansion works for ordinary growth at the cost of a few MiB at most.
const (
	defaultGrowth       = 8
	defaultRoomFATBytes = 4 << 20
)

// imageMkfsOptions are the formatter's options for an image of size bytes with params.
func imageMkfsOptions(size int64, params volume.Params) (mkfs.Options, error) {
	opts, err := params.MkfsOptions(512)
	if err != nil {
		return opts, err
	}
	if params.MaxSize != 0 {
		if params.MaxSize < size {
			return opts, fmt.Errorf("%w: %s %d bytes is below the volume's %d bytes", mkfs.ErrNoFit, volume.ParamMaxSize, params.MaxSize, size)
		}
		opts.MaxSize = params.MaxSize
		return opts, nil
	}
	bs, err := mkfs.Plan(size, opts)
	if err != nil {
		return opts, err
	}
	g, err := bs.Geometry(size)
	if err != nil {
		return opts, err
	}
	room := opts
	room.FATType, room.SectorsPerCluster = g.Type, g.SectorsPerCluster
	clusters := min(int64(ondisk.MaxClusters(g.Type)), int64(g.Clusters)+defaultRoomFATBytes*8/int64(g.Type))
	room.MaxSize = min(defaultGrowth*size, (g.FirstDataSector*int64(g.SectorSize))+clusters*int64(g.ClusterSize), volume.MaxImageSize)
	// The longer FATs move the data area, so at the type's limit the first guess may be a little
	// too large for the type: step down a few times, else mkfs.fat's layout without room.
	step := max(16*int64(g.ClusterSize), 64<<10)
	for try := 0; try < 8 && room.MaxSize > size; try++ {
		if _, err := mkfs.Plan(size, room); err == nil {
			return room, nil
		}
		room.MaxSize -= step
	}
	return opts, nil
}

// growLimit is how large an image of size bytes formatted with params can grow.
func growLimit(size int64, params volume.Params) (int64, error) {
	opts, err := imageMkfsOptions(size, params)
	if err != nil {
		return 0, err
	}
	bs, err := mkfs.Plan(size, opts)
	if err != nil {
		return 0, err
	}
	g, err := bs.Geometry(size)
	if err != nil {
		return 0, err
	}
	return g.MaxGrowSectors() * int64(g.SectorSize), nil
}

// formatImage formats an image of size bytes for params, with its growth room, and closes it.
func formatImage(dev *blockdev.File, size int64, params volume.Params) error {
	opts, err := imageMkfsOptions(size, params)
	if err == nil {
		_, err = mkfs.Format(dev, opts)
	}
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// ExpandVolume grows a volume's image to at least required bytes (at most limit; 0: none) for
// ControllerExpandVolume and returns its size; the file system grows at NodeExpandVolume. A
// volume at least that large already is left as it is. Refused before anything changes: a USB
// volume (a device cannot grow) and a size past what the file system can grow to are
// OutOfRange, growth the pool has no room for is ResourceExhausted.
func (m *Manager) ExpandVolume(ctx context.Context, volumeID string, required, limit int64) (int64, error) {
	id, err := m.ownID(volumeID)
	if err != nil {
		return 0, err
	}
	unlock, err := m.lock(id.Name, "ControllerExpandVolume")
	if err != nil {
		return 0, err
	}
	defer unlock()
	rec, err := m.record(id)
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
			rec.ID, max(rec.MaxSize, rec.Size), required, volume.ParamMaxSize, defaultGrowth)
	}
	within := rec.MaxSize
	if limit != 0 {
		within = min(within, limit)
	}
	size, ok := alignedSize(required, within)
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
		return 0, status.Errorf(codes.ResourceExhausted, "image pool %s has room for %d more bytes, volume %s needs %d more", m.images.dir, avail, rec.ID, size-rec.Size)
	}
	if err := growImageFile(m.images.path(rec.Name), size); err != nil {
		return 0, status.Errorf(codes.Internal, "volume %s: %v", rec.ID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.state.Volumes[id.Name]
	old := v.Size
	v.Size = size
	if err := m.saveLocked(); err != nil {
		v.Size = old
		return 0, err
	}
	klog.InfoS("expanded volume", "volume", rec.ID, "from", old, "size", size)
	return size, nil
}

// alignedSize rounds required up to a whole MiB, else 4 KiB, else a sector, within limit.
func alignedSize(required, limit int64) (int64, bool) {
	for _, align := range []int64{1 << 20, 4096, 512} {
		if up := (required + align - 1) / align * align; limit == 0 || up <= limit {
			return up, true
		}
	}
	return 0, false
}

// growImageFile makes the image at path size bytes long (never shorter), durably: a sparse
// extension whose new size survives a crash before the file system counts on it.
func growImageFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("grow image: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("grow image %s: %w", path, err)
	}
	if st.Size() >= size {
		return nil
	}
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("grow image %s to %d bytes: %w", path, size, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("grow image %s: %w", path, err)
	}
	return nil
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
// for NodeExpandVolume, and returns the file system's size. The staging's record keeps it.
func (m *Manager) NodeExpand(ctx context.Context, volumeID, volumePath string, required int64) (int64, error) {
	rec, err := m.nodeVolume(volumeID)
	if err != nil {
		return 0, err
	}
	unlock, err := m.lock(rec.Name, "NodeExpandVolume")
	if err != nil {
		return 0, err
	}
	defer unlock()
	path := filepath.Clean(volumePath)
	m.mu.Lock()
	st := m.state.Staged[rec.Name]
	pub := m.state.Published[path]
	sv := m.served[rec.Name]
	m.mu.Unlock()
	if (st == nil || st.Path != path) && (pub == nil || pub.Name != rec.Name) {
		return 0, status.Errorf(codes.NotFound, "volume %s is not staged or published at %s", rec.ID, path)
	}
	if required > rec.Size {
		return 0, status.Errorf(codes.OutOfRange, "volume %s has %d bytes, %d asked: ControllerExpandVolume grows it first", rec.ID, rec.Size, required)
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
	m.mu.Lock()
	defer m.mu.Unlock()
	if st := m.state.Staged[rec.Name]; st != nil && (grew || st.Size != 0) && st.Size != n {
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
	if sv.remote != nil {
		if sv.remote.IsGone() {
			return 0, false, errors.New(sv.remote.EndedWhy())
		}
		resp, err := sv.remote.Call(&protocol.Request{Op: protocol.OpGrow}, mounters.ServeTimeout)
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
