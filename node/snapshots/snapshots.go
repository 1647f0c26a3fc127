package snapshots

import (
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-fat/csi-fat/node/imagepool"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/mediapool"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Volumes is what copies need of the node's volumes beyond their records (node.Manager's).
type Volumes interface {
	// DevicePath is the path of the volume's device: its image, or its stick.
	DevicePath(rec volume.Record) (string, error)
	// Served is the hold of the named volume's server when the volume is served now, else nil:
	// hold writes the volume back and lets no operation through until release, which answers
	// how long it held (mounters.ErrOld: the server cannot hold).
	Served(name string) (hold func(limit time.Duration) (release func() (time.Duration, error), err error))
	// CheckCopy checks a fresh copy of rec's volume in f and repairs what the copy of a volume
	// in use holds, unprivileged.
	CheckCopy(rec volume.Record, f *os.File) error
	// ImageCapacity is how many bytes the image pool can still promise to a new volume.
	ImageCapacity() (int64, error)
}

// Snapshots makes, lists and deletes a node's snapshots, and volumes from snapshots or volumes.
type Snapshots struct {
	nodeID     string
	maxVolumes int // 0: no bound
	store      *volume.Store
	locks      *volume.Locks
	provision  *sync.Mutex // serializes choosing where a new volume goes with making it
	images     *imagepool.Pool
	usb        *media.Config   // nil: no removable-media pool
	media      *mediapool.Pool // nil with it
	volumes    Volumes
}

// Config is where the node keeps what Snapshots works on, and the locks it shares with the
// node's other operations.
type Config struct {
	NodeID     string
	MaxVolumes int
	Store      *volume.Store
	Locks      *volume.Locks
	Provision  *sync.Mutex
	Images     *imagepool.Pool
	USB        *media.Config
	Media      *mediapool.Pool
	Volumes    Volumes
}

// New is the snapshots of the node c describes.
func New(c Config) *Snapshots {
	return &Snapshots{nodeID: c.NodeID, maxVolumes: c.MaxVolumes, store: c.Store, locks: c.Locks, provision: c.Provision,
		images: c.Images, usb: c.USB, media: c.Media, volumes: c.Volumes}
}

// saveLocked writes the node's state; the caller holds the store's mutex.
func (sn *Snapshots) saveLocked() error {
	if err := sn.store.SaveLocked(); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}
