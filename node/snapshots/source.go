package snapshots

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/volume"
)

// ContentSource is what a new volume is made from: a snapshot (a restore) or another volume (a
// clone), by ID; exactly one is set.
type ContentSource struct {
	Snapshot string
	Volume   string
}

// ID is the source's ID, as a volume made from it records it.
func (s ContentSource) ID() string {
	if s.Snapshot != "" {
		return s.Snapshot
	}
	return s.Volume
}

// CreateVolumeFrom makes the named volume as a copy of a snapshot or of a volume of this node,
// in the image pool or on a USB stick (copyOntoStick), or returns it when it exists made from the same source with a compatible
// size and the same parameters (AlreadyExists otherwise). The new volume is at least as large as
// its source: a larger one is the source's file system in a larger image (the file system keeps
// its size). A volume in use is held for the copy as for a snapshot (copyVolume); a snapshot is
// not in use, so a restore holds nothing.
func (sn *Snapshots) CreateVolumeFrom(ctx context.Context, name string, required, limit int64, params volume.Params, src ContentSource) (volume.Record, error) {
	if err := volume.ValidateName(name); err != nil {
		return volume.Record{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if (src.Snapshot == "") == (src.Volume == "") {
		return volume.Record{}, status.Error(codes.InvalidArgument, "the volume content source names neither a snapshot nor a volume")
	}
	if params.Pool == volume.PoolUSB {
		if sn.usb == nil {
			return volume.Record{}, status.Errorf(codes.InvalidArgument, "the removable-media pool is not enabled on node %s", sn.nodeID)
		}
		if params.Adopt {
			return volume.Record{}, status.Errorf(codes.InvalidArgument, "%s=true keeps a stick's own files; a volume from a snapshot or a volume holds its source's", volume.ParamAdopt)
		}
	}
	unlock, err := sn.locks.Take(name, "CreateVolume")
	if err != nil {
		return volume.Record{}, err
	}
	defer unlock()
	sn.store.Lock()
	existing, exists := sn.store.Volumes[name]
	count := len(sn.store.Volumes)
	sn.store.Unlock()
	if exists {
		switch {
		case existing.Ephemeral:
			return volume.Record{}, status.Errorf(codes.AlreadyExists, "volume name %s is taken by an ephemeral inline volume", name)
		case existing.Source != src.ID():
			return volume.Record{}, status.Errorf(codes.AlreadyExists, "volume %s exists, made from %q, not from %s", name, existing.Source, src.ID())
		case existing.Params != params:
			return volume.Record{}, status.Errorf(codes.AlreadyExists, "volume %s exists with other parameters (%v)", name, existing.Params.Map())
		case existing.Size < required || (limit != 0 && existing.Size > limit):
			return volume.Record{}, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, outside %d..%d", name, existing.Size, required, limit)
		}
		return *existing, nil
	}

	// What to copy, and how: a snapshot's file, or a volume's device.
	var (
		srcSize int64
		srcRoom int64 // how far the source's file system can grow in place
		fill    func(budget int64) func(*os.File) (copied, error)
	)
	if src.Snapshot != "" {
		sid, err := sn.ownSnapshotID(src.Snapshot)
		if err != nil {
			return volume.Record{}, sn.sourceElsewhere(err, sid.Node, src.Snapshot)
		}
		unlockSnap, err := sn.lockSnapshot(sid.Name, opRestore)
		if err != nil {
			return volume.Record{}, err
		}
		defer unlockSnap()
		snap, err := sn.snapshot(sid)
		if err != nil {
			return volume.Record{}, err
		}
		srcSize, srcRoom = snap.Size, snap.MaxSize
		fill = func(budget int64) func(*os.File) (copied, error) {
			return func(dst *os.File) (copied, error) { return sn.copySnapshot(snap, dst, budget) }
		}
	} else {
		vid, err := volume.OwnID(src.Volume, sn.nodeID)
		if err != nil {
			return volume.Record{}, sn.sourceElsewhere(err, vid.Node, src.Volume)
		}
		rec, err := sn.store.Record(vid)
		if err != nil {
			return volume.Record{}, err
		}
		if rec.Ephemeral {
			return volume.Record{}, status.Errorf(codes.NotFound, "volume %s is an inline volume of a pod, not one the controller knows", src.Volume)
		}
		unlockSource, err := sn.locks.Take(vid.Name, "CreateVolume")
		if err != nil {
			return volume.Record{}, err
		}
		defer unlockSource()
		if srcSize, err = sn.copyLength(rec); err != nil {
			return volume.Record{}, err
		}
		srcRoom = rec.MaxSize
		fill = func(budget int64) func(*os.File) (copied, error) {
			return func(dst *os.File) (copied, error) { return sn.copyVolume(rec, dst, budget) }
		}
	}
	size, err := copySize(required, limit, srcSize)
	if err != nil {
		return volume.Record{}, err
	}
	if params.Pool == volume.PoolUSB {
		// A stick has the size it has: any that holds the source and what was asked fits.
		return sn.copyOntoStick(name, max(required, srcSize), limit, params, src, count, fill(0))
	}

	sn.provision.Lock()
	defer sn.provision.Unlock()
	if max := sn.maxVolumes; max > 0 && count >= max {
		return volume.Record{}, status.Errorf(codes.ResourceExhausted, "node %s has %d volumes, its maximum", sn.nodeID, count)
	}
	avail, err := sn.volumes.ImageCapacity()
	if err != nil {
		return volume.Record{}, status.Error(codes.Internal, err.Error())
	}
	if size > avail {
		return volume.Record{}, status.Errorf(codes.ResourceExhausted, "image pool %s can make volumes up to %d bytes, %d asked", sn.images.Dir, avail, size)
	}
	how, err := makeCopy(sn.images.CreatingPath(name), sn.images.Path(name), size, fill(avail))
	if err != nil {
		return volume.Record{}, err
	}
	rec := volume.Record{
		ID:      volume.ID{Pool: volume.PoolImage, Node: sn.nodeID, Name: name}.String(),
		Name:    name,
		Size:    size,
		MaxSize: srcRoom,
		Params:  params,
		Created: time.Now().UTC(),
		Source:  src.ID(),
	}
	sn.store.Lock()
	defer sn.store.Unlock()
	sn.store.Volumes[name] = &rec
	if err := sn.saveLocked(); err != nil {
		delete(sn.store.Volumes, name)
		sn.images.Remove(name)
		return volume.Record{}, err
	}
	klog.InfoS("created volume from a source", "volume", rec.ID, "source", rec.Source, "size", rec.Size, "reflink", how.Reflinked, "written", how.Written, "held", how.held)
	return rec, nil
}

// sourceElsewhere turns the error for a source that lives on another node (srcNode, from its
// ID) into ResourceExhausted, the spec's code for a volume that cannot be made in this topology:
// the provisioner of a node-local driver then hands the claim back to the scheduler, which can
// pick the source's node, where NotFound would be final. Other errors pass unchanged.
func (sn *Snapshots) sourceElsewhere(err error, srcNode, srcID string) error {
	if srcNode == "" || srcNode == sn.nodeID {
		return err
	}
	return status.Errorf(codes.ResourceExhausted, "source %s lives on node %s: a volume made from it can be provisioned there only, not on node %s", srcID, srcNode, sn.nodeID)
}

// copyOntoStick makes the named volume on the smallest free USB stick of at least size bytes
// (and at most limit): fill writes the source over the whole stick's first bytes, its boot
// sector last, so that a copy cut short leaves a stick with no file system, which the next claim
// formats. A larger stick keeps the source's file system with its size. The caller holds the
// name's and the source's locks.
func (sn *Snapshots) copyOntoStick(name string, size, limit int64, params volume.Params, src ContentSource, count int, fill func(*os.File) (copied, error)) (volume.Record, error) {
	sn.provision.Lock()
	defer sn.provision.Unlock()
	if max := sn.maxVolumes; max > 0 && count >= max {
		return volume.Record{}, status.Errorf(codes.ResourceExhausted, "node %s has %d volumes, its maximum", sn.nodeID, count)
	}
	free, claims, skipped, err := sn.media.Free()
	if err != nil {
		return volume.Record{}, status.Error(codes.Internal, err.Error())
	}
	var why []string
	for _, d := range free {
		if c := claims[d.ID]; c != nil {
			why = append(why, fmt.Sprintf("%s: volumes hold its partitions (%s)", d.ID, c.Volumes()))
			continue
		}
		if d.Size < size || (limit != 0 && d.Size > limit) {
			why = append(why, fmt.Sprintf("%s: %d bytes", d.ID, d.Size))
			continue
		}
		dev, err := blockdev.OpenClaimed(d.Path, blockdev.Exclusive)
		if errors.Is(err, blockdev.ErrInUse) {
			why = append(why, fmt.Sprintf("%s: %v", d.ID, err)) // another writer has it: try the next
			continue
		} else if err != nil {
			return volume.Record{}, status.Errorf(codes.Internal, "removable medium %s (%s): %v", d.ID, d.Path, err)
		}
		how, err := fill(dev.OSFile())
		if cerr := dev.Close(); err == nil && cerr != nil {
			err = status.Errorf(codes.Internal, "removable medium %s (%s): %v", d.ID, d.Path, cerr)
		}
		if err != nil {
			return volume.Record{}, err
		}
		rec := volume.Record{
			ID:      volume.ID{Pool: volume.PoolUSB, Node: sn.nodeID, Name: name}.String(),
			Name:    name,
			Size:    d.Size,
			Params:  params,
			Created: time.Now().UTC(),
			Device:  d.ID,
			Source:  src.ID(),
		}
		sn.store.Lock()
		defer sn.store.Unlock()
		sn.store.Volumes[name] = &rec
		if err := sn.saveLocked(); err != nil {
			delete(sn.store.Volumes, name)
			return volume.Record{}, err
		}
		klog.InfoS("created volume from a source", "volume", rec.ID, "source", rec.Source, "device", d.ID, "size", rec.Size, "written", how.Written, "held", how.held)
		return rec, nil
	}
	why = append(why, skipped...)
	if len(why) == 0 {
		why = []string{"no free removable medium is attached"}
	}
	return volume.Record{}, status.Errorf(codes.ResourceExhausted, "%v for %d..%d bytes: %s", media.ErrNoDevice, size, limit, strings.Join(why, "; "))
}

// copySnapshot copies a snapshot's file into dst. Snapshots never change, so nothing is held.
func (sn *Snapshots) copySnapshot(snap volume.SnapshotRecord, dst *os.File, budget int64) (copied, error) {
	src, err := os.Open(sn.snapshotPath(snap.Name))
	if err != nil {
		return copied{}, status.Errorf(codes.Internal, "snapshot %s: %v", snap.ID, err)
	}
	defer src.Close()
	res, err := blockdev.CopyImage(dst, src, snap.Size, blockdev.CopyOptions{Budget: budget})
	if err != nil {
		return copied{}, copyError("snapshot "+snap.ID, err)
	}
	return copied{CopyResult: res}, nil
}

// copySize is the size of a volume made from a source of srcSize bytes: the source's size, or
// the size asked for when larger (rounded up as chooseImageSize does, within the limit). A limit
// below the source's size cannot be met: OutOfRange.
func copySize(required, limit, srcSize int64) (int64, error) {
	if limit != 0 && limit < srcSize {
		return 0, status.Errorf(codes.OutOfRange, "the source has %d bytes, more than the limit of %d", srcSize, limit)
	}
	if required <= srcSize {
		return srcSize, nil
	}
	size := required
	for _, align := range []int64{1 << 20, 4096, 512} {
		if up := (size + align - 1) / align * align; limit == 0 || up <= limit {
			size = up
			break
		}
	}
	if size > volume.MaxImageSize {
		return 0, status.Errorf(codes.OutOfRange, "%d bytes is more than the largest FAT volume, %d", size, volume.MaxImageSize)
	}
	return size, nil
}
