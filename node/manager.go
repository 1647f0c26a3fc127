package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/imagepool"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/mediapool"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/prober"
	"github.com/csi-fat/csi-fat/node/serving"
	"github.com/csi-fat/csi-fat/node/snapshots"
	"github.com/csi-fat/csi-fat/node/volume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Config is what the node side needs to know.
type Config struct {
	NodeID string
	// TopologyKey names the one topology segment, whose value is the node ID.
	TopologyKey string
	// StateDir holds the node-local state file.
	StateDir string
	// PoolDir is the image pool's directory.
	PoolDir string
	// Reserve is bytes of the image pool's file system never promised to volumes.
	Reserve int64
	// MaxVolumes bounds the volumes on this node (0: no bound).
	MaxVolumes int
	// USB enables the USB pool; nil leaves it off.
	USB *media.Config
	// Mounter says where volumes are served: in this process (the zero value) or each in a
	// mounter process of its own that outlives this one.
	Mounter mounters.Config
	// InProcess is the engine in this process (package node/inprocess), which the in-process
	// mode serves, checks and reads media with; the other modes need none.
	InProcess serving.Engine `json:"-"`
}

// Manager owns the node's volumes: their pools, their records in the node-local state, and
// the FUSE servers of the staged ones. Its methods answer with gRPC status errors, since
// both CSI services call them.
type Manager struct {
	cfg    Config
	images imagepool.Pool
	usb    *media.Config
	mounts *hostmount.Table
	locks  *volume.Locks
	// provision serializes choosing where a new volume goes with making it, so two creates
	// cannot both count on the same free space or claim the same device.
	provision sync.Mutex

	// launcher starts, adopts and ends the mounters outside the in-process mode.
	launcher *mounters.Launcher
	// prober looks at what free removable media hold.
	prober *prober.Prober
	// media is the removable-media pool; nil when it is off.
	media *mediapool.Pool
	// snapshots makes snapshots, and volumes from snapshots or other volumes.
	snapshots *snapshots.Snapshots

	// store holds the node's records; its mutex guards served too.
	store  *volume.Store
	served map[string]*servedVolume // by volume name
}

// NewManager checks the configuration, makes the directories and reads the node-local state.
// Call Restore next to serve what was staged before.
func NewManager(cfg Config) (*Manager, error) {
	if err := volume.ValidateNodeID(cfg.NodeID); err != nil {
		return nil, err
	}
	if cfg.TopologyKey == "" {
		return nil, fmt.Errorf("no topology key")
	}
	if err := cfg.Mounter.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Mounter.OutOfProcess() && cfg.InProcess == nil {
		return nil, fmt.Errorf("mounter mode %q serves volumes in this process, but no engine was given (node.Config.InProcess)", mounters.InProcess)
	}
	if cfg.USB != nil {
		if err := cfg.USB.ValidatePatterns(); err != nil {
			return nil, err
		}
	}
	for _, dir := range []string{cfg.StateDir, cfg.PoolDir} {
		if !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("directory %q is not an absolute path", dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	m := &Manager{
		cfg:      cfg,
		images:   imagepool.Pool{Dir: cfg.PoolDir, Reserve: cfg.Reserve},
		usb:      cfg.USB,
		mounts:   hostmount.NewTable(),
		locks:    volume.NewLocks(),
		launcher: mounters.NewLauncher(cfg.Mounter, cfg.StateDir, cfg.NodeID, cfg.PoolDir),
		prober:   prober.New(cfg.Mounter, cfg.InProcess),
		served:   map[string]*servedVolume{},
	}
	if err := m.images.RemoveLeftovers(); err != nil {
		return nil, err
	}
	store, err := volume.OpenStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	m.store = store
	if cfg.USB != nil {
		m.media = mediapool.New(cfg.USB, m.prober, m.checkAdoptable, store.VolumeRecords)
	}
	m.snapshots = snapshots.New(snapshots.Config{
		NodeID: cfg.NodeID, MaxVolumes: cfg.MaxVolumes, Store: store, Locks: m.locks, Provision: &m.provision,
		Images: &m.images, USB: cfg.USB, Media: m.media, Volumes: copySources{m},
	})
	if err := m.snapshots.DropUnfinished(); err != nil {
		return nil, err
	}
	return m, nil
}

// NodeID is the node's ID.
func (m *Manager) NodeID() string { return m.cfg.NodeID }

// TopologyKey is the topology segment's key.
func (m *Manager) TopologyKey() string { return m.cfg.TopologyKey }

// MaxVolumes is the bound on volumes on this node, 0 for none.
func (m *Manager) MaxVolumes() int { return m.cfg.MaxVolumes }

// USBEnabled tells whether the USB pool is on.
func (m *Manager) USBEnabled() bool { return m.usb != nil }

// Probe checks that the image pool's file system answers.
func (m *Manager) Probe() error {
	_, err := m.images.Free()
	return err
}

// saveLocked writes the state; the caller holds m.store.
func (m *Manager) saveLocked() error {
	if err := m.store.SaveLocked(); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// Snapshots makes, lists and deletes the node's snapshots, and volumes from snapshots or volumes.
func (m *Manager) Snapshots() *snapshots.Snapshots { return m.snapshots }

// Volume returns the record of the volume with this ID: InvalidArgument for an empty ID,
// NotFound for any other that names no volume here.
func (m *Manager) Volume(volumeID string) (volume.Record, error) {
	id, err := volume.OwnID(volumeID, m.cfg.NodeID)
	if err != nil {
		return volume.Record{}, err
	}
	return m.store.Record(id)
}

// CreateVolume makes the named volume, or returns it when it exists with a compatible size
// and the same parameters (AlreadyExists otherwise).
func (m *Manager) CreateVolume(ctx context.Context, name string, required, limit int64, params volume.Params) (volume.Record, error) {
	return m.createVolume(name, required, limit, params, m.media.ClaimFor)
}

// claimFunc chooses and prepares the removable medium of a new volume: claimUSB picks the best
// free one; discovery mode names the one it publishes.
type claimFunc func(required, limit int64, params volume.Params) (mediapool.Claim, error)

// createVolume is CreateVolume with the way a removable medium is claimed given.
func (m *Manager) createVolume(name string, required, limit int64, params volume.Params, claim claimFunc) (volume.Record, error) {
	if err := volume.ValidateName(name); err != nil {
		return volume.Record{}, status.Error(codes.InvalidArgument, err.Error())
	}
	unlock, err := m.locks.Take(name, "CreateVolume")
	if err != nil {
		return volume.Record{}, err
	}
	defer unlock()

	m.store.Lock()
	existing, exists := m.store.Volumes[name]
	count := len(m.store.Volumes)
	m.store.Unlock()
	if exists {
		switch {
		case existing.Ephemeral:
			return volume.Record{}, status.Errorf(codes.AlreadyExists, "volume name %s is taken by an ephemeral inline volume", name)
		case existing.Source != "":
			return volume.Record{}, status.Errorf(codes.AlreadyExists, "volume %s exists, made from %s", name, existing.Source)
		case existing.Params != params:
			return volume.Record{}, status.Errorf(codes.AlreadyExists, "volume %s exists with other parameters (%v)", name, existing.Params.Map())
		case existing.Size < required || (limit != 0 && existing.Size > limit):
			return volume.Record{}, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, outside %d..%d", name, existing.Size, required, limit)
		}
		return *existing, nil
	}
	if params.Pool == volume.PoolUSB && m.usb == nil {
		return volume.Record{}, status.Errorf(codes.InvalidArgument, "the usb pool is not enabled on node %s", m.cfg.NodeID)
	}

	m.provision.Lock()
	defer m.provision.Unlock()
	if max := m.cfg.MaxVolumes; max > 0 && count >= max {
		return volume.Record{}, status.Errorf(codes.ResourceExhausted, "node %s has %d volumes, its maximum", m.cfg.NodeID, count)
	}
	rec := volume.Record{
		ID:      volume.ID{Pool: params.Pool, Node: m.cfg.NodeID, Name: name}.String(),
		Name:    name,
		Params:  params,
		Created: time.Now().UTC(),
	}
	switch params.Pool {
	case volume.PoolImage:
		size, err := imagepool.ChooseSize(required, limit, params)
		if err != nil {
			return volume.Record{}, err
		}
		if rec.MaxSize, err = imagepool.GrowLimit(size, params); err != nil {
			return volume.Record{}, status.Errorf(codes.OutOfRange, "volume %s of %d bytes: %v", name, size, err)
		}
		avail, err := m.imageCapacity()
		if err != nil {
			return volume.Record{}, status.Error(codes.Internal, err.Error())
		}
		if size > avail {
			return volume.Record{}, status.Errorf(codes.ResourceExhausted, "image pool %s can make volumes up to %d bytes, %d asked", m.images.Dir, avail, size)
		}
		if err := m.images.Create(name, size, params); err != nil {
			return volume.Record{}, status.Error(codes.Internal, err.Error())
		}
		rec.Size = size
	case volume.PoolUSB:
		c, err := claim(required, limit, params)
		if err != nil {
			return volume.Record{}, err
		}
		rec.Size, rec.Device, rec.Partition = c.Size, c.Dev.ID, c.Partition
	}

	m.store.Lock()
	defer m.store.Unlock()
	m.store.Volumes[name] = &rec
	if err := m.saveLocked(); err != nil {
		delete(m.store.Volumes, name)
		if rec.Device == "" {
			m.images.Remove(name)
		}
		return volume.Record{}, err
	}
	klog.InfoS("created volume", "volume", rec.ID, "size", rec.Size, "device", rec.Device, "partition", rec.Partition)
	return rec, nil
}

// DeleteVolume removes a volume: its image, or its claim on a USB device after the reclaim
// policy. A volume that does not exist is already deleted, and so is one whose ID this driver
// could never have issued.
func (m *Manager) DeleteVolume(ctx context.Context, volumeID string) error {
	if volumeID == "" {
		return status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	id, err := volume.ParseID(volumeID)
	if err != nil {
		klog.V(2).InfoS("deleting a volume whose ID this driver never issues: nothing to do", "volume", volumeID, "reason", err)
		return nil
	}
	if id.Node != m.cfg.NodeID {
		// The volume may well exist on its own node: answering OK here would let the CO forget a
		// volume that still holds data there. Only that node's controller can delete it.
		return status.Errorf(codes.InvalidArgument, "volume %s lives on node %s; this is node %s, whose controller deletes only its own volumes", volumeID, id.Node, m.cfg.NodeID)
	}
	unlock, err := m.locks.Take(id.Name, "DeleteVolume")
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := m.store.Record(id)
	if status.Code(err) == codes.NotFound {
		return nil
	}
	m.store.Lock()
	staged := m.store.Staged[id.Name]
	m.store.Unlock()
	if staged != nil {
		return status.Errorf(codes.FailedPrecondition, "volume %s is staged at %s; unstage it first", volumeID, staged.Path)
	}
	switch id.Pool {
	case volume.PoolImage:
		if err := m.images.Remove(id.Name); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	case volume.PoolUSB:
		if rec.Params.Reclaim == volume.ReclaimWipe {
			if err := m.wipeUSB(rec); err != nil {
				return err
			}
		}
	}
	m.store.Lock()
	defer m.store.Unlock()
	delete(m.store.Volumes, id.Name)
	if err := m.saveLocked(); err != nil {
		return err
	}
	klog.InfoS("deleted volume", "volume", volumeID)
	return nil
}

// wipeUSB leaves a fresh empty file system on a released device, or in the released partition
// (wipePartition): never on the table or another partition.
func (m *Manager) wipeUSB(rec volume.Record) error {
	if m.usb == nil {
		return status.Errorf(codes.FailedPrecondition, "volume %s: the usb pool is not enabled, so its device cannot be wiped", rec.ID)
	}
	dev, err := m.usb.Find(rec.Device)
	if errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.FailedPrecondition, "volume %s has reclaim=wipe but its device %s is not attached", rec.ID, rec.Device)
	}
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	p := rec.Params
	p.Adopt = false
	if rec.Partition != "" {
		err = m.media.WipePartition(dev.Path, rec.Partition, p)
	} else {
		err = mediapool.Format(dev.Path, p)
	}
	m.prober.Forget(dev.Path)
	if err != nil {
		return status.Errorf(claimCode(err, codes.Internal), "wipe usb device %s (%s): %v", dev.ID, dev.Path, err)
	}
	return nil
}

// Capacity is the largest volume that can still be made in the pool these parameters name:
// for the image pool the free space of its file system less the reserve and less what the
// images already made may still fill; for the USB pool the largest free device.
func (m *Manager) Capacity(params volume.Params) (int64, error) {
	m.store.Lock()
	count := len(m.store.Volumes)
	m.store.Unlock()
	if max := m.cfg.MaxVolumes; max > 0 && count >= max {
		return 0, nil
	}
	switch params.Pool {
	case volume.PoolUSB:
		if m.usb == nil {
			return 0, nil
		}
		free, claims, _, err := m.media.Free()
		if err != nil {
			return 0, status.Error(codes.Internal, err.Error())
		}
		return m.media.Capacity(free, claims, params), nil
	default:
		c, err := m.imageCapacity()
		if err != nil {
			return 0, status.Error(codes.Internal, err.Error())
		}
		return imagepool.Largest(c, params), nil
	}
}

// imageCapacity is the largest image that can still be made without overcommitting the pool.
func (m *Manager) imageCapacity() (int64, error) {
	free, err := m.images.Free()
	if err != nil {
		return 0, err
	}
	m.store.Lock()
	var promised int64
	for _, v := range m.store.Volumes {
		if v.Device == "" {
			promised += m.images.Unwritten(v.Name, v.Size)
		}
	}
	m.store.Unlock()
	return min(max(free-promised-m.images.Reserve, 0), volume.MaxImageSize), nil
}

// devicePath is where a volume's bytes are now: its image, or its USB device's node.
func (m *Manager) devicePath(rec volume.Record) (string, error) {
	if rec.Device == "" {
		p := m.images.Path(rec.Name)
		if _, err := os.Stat(p); err != nil {
			return "", status.Errorf(codes.Internal, "volume %s: image: %v", rec.ID, err)
		}
		return p, nil
	}
	if m.usb == nil {
		return "", status.Errorf(codes.FailedPrecondition, "volume %s is on a usb device but the usb pool is not enabled", rec.ID)
	}
	dev, err := m.usb.Find(rec.Device)
	if errors.Is(err, os.ErrNotExist) {
		return "", status.Errorf(codes.FailedPrecondition, "volume %s: usb device %s is not attached", rec.ID, rec.Device)
	}
	if err != nil {
		return "", status.Error(codes.Internal, err.Error())
	}
	return dev.Path, nil
}

// Shutdown writes every served volume back and makes it durable, for a plugin about to exit.
// The mounts stay: those this process serves end with it and Restore serves them again; those
// mounter processes serve live on and Restore adopts them.
func (m *Manager) Shutdown() {
	m.store.Lock()
	served := make([]*servedVolume, 0, len(m.served))
	for _, sv := range m.served {
		served = append(served, sv)
	}
	m.store.Unlock()
	for _, sv := range served {
		if sv.gone() {
			continue
		}
		if err := sv.sync(); err != nil {
			klog.ErrorS(err, "writing back at shutdown", "volume", sv.id)
		}
	}
}

// Release undoes what this process mounted, for the demo and tests that end with volumes still
// staged: every published target is unmounted (lazily if busy) and every served volume
// unmounted and closed, writing it back. The records stay, so a new run would restore them.
func (m *Manager) Release() {
	m.store.Lock()
	targets := make([]string, 0, len(m.store.Published))
	for t := range m.store.Published {
		targets = append(targets, t)
	}
	served := m.served
	m.served = map[string]*servedVolume{}
	m.store.Unlock()
	for _, t := range targets {
		if err := m.mounts.Unmount(t); err != nil {
			m.mounts.DetachAll(t)
		}
	}
	for _, sv := range served {
		if p := sv.mounter(); p != nil {
			if err := sv.stop(); err != nil {
				m.mounts.DetachAll(sv.path)
				if err := p.Stop(sv.path); err != nil {
					klog.ErrorS(err, "stopping a mounter", "volume", sv.id)
				}
			}
			continue
		}
		if err := sv.stop(); err != nil && !sv.gone() {
			m.mounts.DetachAll(sv.path)
			select {
			case <-sv.local.Done():
			case <-time.After(unmountWait):
				klog.ErrorS(err, "a detached mount is still in use; closing its volume under it", "volume", sv.id)
			}
			if err := sv.local.Close(); err != nil {
				klog.ErrorS(err, "writing back", "volume", sv.id)
			}
		}
	}
}

// ListVolumes returns this node's provisioned volumes in name order: those whose names sort
// after the name after ("" for the start), at most limit of them (0 for all), and whether more
// follow. Ephemeral inline volumes belong to their pods, not to the controller, and are left out.
func (m *Manager) ListVolumes(after string, limit int) (recs []volume.Record, more bool) {
	m.store.Lock()
	for _, v := range m.store.Volumes {
		if !v.Ephemeral && v.Name > after {
			recs = append(recs, *v)
		}
	}
	m.store.Unlock()
	slices.SortFunc(recs, func(a, b volume.Record) int { return strings.Compare(a.Name, b.Name) })
	if limit > 0 && len(recs) > limit {
		return recs[:limit], true
	}
	return recs, false
}
