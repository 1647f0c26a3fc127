package snapshots

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/csi-fat/csi-fat/node/imagepool"
	"github.com/csi-fat/csi-fat/node/volume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Dir is the image pool's subdirectory of snapshots.
const Dir = "snapshots"

func (sn *Snapshots) snapshotDir() string { return filepath.Join(sn.images.Dir, Dir) }

func (sn *Snapshots) snapshotPath(name string) string {
	return filepath.Join(sn.snapshotDir(), name+imagepool.ImageSuffix)
}

func (sn *Snapshots) snapshotCreatingPath(name string) string {
	return filepath.Join(sn.snapshotDir(), "."+name+imagepool.ImageSuffix+imagepool.CreatingSuffix)
}

// snapshotLock is the lock name of a snapshot: apart from volume names, which have no '/'.
func snapshotLock(name string) string { return "snapshot/" + name }

// opRestore is what holds a snapshot's lock while a volume is restored from it.
const opRestore = "CreateVolume from it"

// lockSnapshot takes a snapshot's lock for op. While another operation holds it, the answer is
// Aborted, as for a volume, but for a DeleteSnapshot while a volume is restored from the
// snapshot: then the snapshot is in use, FailedPrecondition as the spec has it.
func (sn *Snapshots) lockSnapshot(name, op string) (func(), error) {
	key := snapshotLock(name)
	if ok, holder := sn.locks.TryLock(key, op); !ok {
		if op == "DeleteSnapshot" && holder == opRestore {
			return nil, status.Errorf(codes.FailedPrecondition, "snapshot %s is in use: a volume is being restored from it; delete it once that is done", name)
		}
		return nil, status.Errorf(codes.Aborted, "an operation on snapshot %s is in flight: %s", name, holder)
	}
	return func() { sn.locks.Unlock(key) }, nil
}

// DropUnfinished removes what a crash left of snapshots being taken: their half-made
// copies and their records, which are not ready.
func (sn *Snapshots) DropUnfinished() error {
	left, err := filepath.Glob(filepath.Join(sn.snapshotDir(), ".*"+imagepool.ImageSuffix+imagepool.CreatingSuffix))
	if err != nil {
		return err
	}
	for _, f := range left {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("snapshots: remove half-made copy: %w", err)
		}
	}
	sn.store.Lock()
	defer sn.store.Unlock()
	changed := false
	for name, s := range sn.store.Snapshots {
		if !s.Ready {
			klog.InfoS("dropping a snapshot whose copy did not finish", "snapshot", s.ID)
			delete(sn.store.Snapshots, name)
			changed = true
		}
	}
	if changed {
		return sn.saveLocked()
	}
	return nil
}

// ownSnapshotID parses a snapshot ID of this node: NotFound for any ID this node could never have
// issued (another form, another node), InvalidArgument for an empty one.
func (sn *Snapshots) ownSnapshotID(snapshotID string) (volume.SnapshotID, error) {
	if snapshotID == "" {
		return volume.SnapshotID{}, status.Error(codes.InvalidArgument, "snapshot ID is missing")
	}
	id, err := volume.ParseSnapshotID(snapshotID)
	if err != nil {
		return volume.SnapshotID{}, status.Errorf(codes.NotFound, "snapshot %q does not exist: %v", snapshotID, err)
	}
	if id.Node != sn.nodeID {
		return id, status.Errorf(codes.NotFound, "snapshot %s lives on node %s, this is node %s", snapshotID, id.Node, sn.nodeID)
	}
	return id, nil
}

// snapshot returns a copy of the ready snapshot's record, or NotFound.
func (sn *Snapshots) snapshot(id volume.SnapshotID) (volume.SnapshotRecord, error) {
	sn.store.Lock()
	defer sn.store.Unlock()
	s, ok := sn.store.Snapshots[id.Name]
	if !ok || s.ID != id.String() || !s.Ready {
		return volume.SnapshotRecord{}, status.Errorf(codes.NotFound, "snapshot %s does not exist", id)
	}
	return *s, nil
}

// CreateSnapshot takes a snapshot of the volume sourceID under name, or returns the snapshot of
// that name when it was taken of the same volume (AlreadyExists for another). The copy is made
// before it returns, so the snapshot is ready then.
func (sn *Snapshots) CreateSnapshot(ctx context.Context, name, sourceID string) (volume.SnapshotRecord, error) {
	if err := volume.ValidateToken("snapshot name", name, volume.MaxNameLength); err != nil {
		return volume.SnapshotRecord{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if sourceID == "" {
		return volume.SnapshotRecord{}, status.Error(codes.InvalidArgument, "source volume ID is missing")
	}
	unlock, err := sn.lockSnapshot(name, "CreateSnapshot")
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	defer unlock()
	sn.store.Lock()
	existing := sn.store.Snapshots[name]
	sn.store.Unlock()
	if existing != nil {
		if existing.Source != sourceID {
			return volume.SnapshotRecord{}, status.Errorf(codes.AlreadyExists, "snapshot %s exists of volume %s, not of %s", existing.ID, existing.Source, sourceID)
		}
		return *existing, nil
	}
	vid, err := volume.OwnID(sourceID, sn.nodeID)
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	rec, err := sn.store.Record(vid)
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	if rec.Ephemeral {
		return volume.SnapshotRecord{}, status.Errorf(codes.NotFound, "volume %s is an inline volume of a pod, not one the controller knows", sourceID)
	}
	unlockSource, err := sn.locks.Take(vid.Name, "CreateSnapshot")
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	defer unlockSource()

	sn.provision.Lock()
	defer sn.provision.Unlock()
	budget, err := sn.copyBudget(rec)
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	length, err := sn.copyLength(rec)
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	snap := volume.SnapshotRecord{
		ID:      volume.SnapshotID{Node: sn.nodeID, Name: name}.String(),
		Name:    name,
		Source:  rec.ID,
		Size:    length,
		MaxSize: rec.MaxSize,
		Created: time.Now().UTC(),
	}
	// Recorded before the copy, not ready: ListSnapshots shows it as it is taken.
	if err := sn.putSnapshot(&snap); err != nil {
		return volume.SnapshotRecord{}, err
	}
	how, err := makeCopy(sn.snapshotCreatingPath(name), sn.snapshotPath(name), length, func(dst *os.File) (copied, error) {
		return sn.copyVolume(rec, dst, budget)
	})
	if err != nil {
		sn.dropSnapshot(name)
		return volume.SnapshotRecord{}, err
	}
	snap.Ready = true
	if err := sn.putSnapshot(&snap); err != nil {
		os.Remove(sn.snapshotPath(name))
		sn.dropSnapshot(name)
		return volume.SnapshotRecord{}, err
	}
	klog.InfoS("took snapshot", "snapshot", snap.ID, "volume", rec.ID, "size", rec.Size, "reflink", how.Reflinked, "written", how.Written, "held", how.held)
	return snap, nil
}

// copyBudget checks that the image pool has room for a copy of the volume (what its image holds;
// a stick's content is not known before it is read) and returns the room there is, which bounds
// the copy.
func (sn *Snapshots) copyBudget(rec volume.Record) (int64, error) {
	avail, err := sn.volumes.ImageCapacity()
	if err != nil {
		return 0, status.Error(codes.Internal, err.Error())
	}
	if rec.Device == "" {
		need := rec.Size - sn.images.Unwritten(rec.Name, rec.Size)
		if need > avail {
			return 0, status.Errorf(codes.ResourceExhausted, "image pool %s has room for %d bytes, a copy of volume %s needs %d", sn.images.Dir, avail, rec.ID, need)
		}
	}
	if avail == 0 {
		return 0, status.Errorf(codes.ResourceExhausted, "image pool %s has no room left", sn.images.Dir)
	}
	return avail, nil
}

func (sn *Snapshots) putSnapshot(s *volume.SnapshotRecord) error {
	sn.store.Lock()
	defer sn.store.Unlock()
	old := sn.store.Snapshots[s.Name]
	c := *s
	sn.store.Snapshots[s.Name] = &c
	if err := sn.saveLocked(); err != nil {
		if old != nil {
			sn.store.Snapshots[s.Name] = old
		} else {
			delete(sn.store.Snapshots, s.Name)
		}
		return err
	}
	return nil
}

func (sn *Snapshots) dropSnapshot(name string) {
	sn.store.Lock()
	defer sn.store.Unlock()
	delete(sn.store.Snapshots, name)
	if err := sn.saveLocked(); err != nil {
		klog.ErrorS(err, "dropping the record of a snapshot that failed", "snapshot", name)
	}
}

// DeleteSnapshot removes a snapshot. One that does not exist is already deleted, and so is one
// whose ID this driver could never have issued; another node's is refused, since only that
// node can delete it. Volumes restored from a snapshot are copies of their own: deleting it
// takes nothing from them.
func (sn *Snapshots) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if snapshotID == "" {
		return status.Error(codes.InvalidArgument, "snapshot ID is missing")
	}
	id, err := volume.ParseSnapshotID(snapshotID)
	if err != nil {
		klog.V(2).InfoS("deleting a snapshot whose ID this driver never issues: nothing to do", "snapshot", snapshotID, "reason", err)
		return nil
	}
	if id.Node != sn.nodeID {
		return status.Errorf(codes.InvalidArgument, "snapshot %s lives on node %s; this is node %s, whose controller deletes only its own snapshots", snapshotID, id.Node, sn.nodeID)
	}
	unlock, err := sn.lockSnapshot(id.Name, "DeleteSnapshot")
	if err != nil {
		return err
	}
	defer unlock()
	sn.store.Lock()
	s := sn.store.Snapshots[id.Name]
	sn.store.Unlock()
	if s == nil || s.ID != snapshotID {
		return nil
	}
	if err := os.Remove(sn.snapshotPath(id.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "delete snapshot %s: %v", snapshotID, err)
	}
	if err := volume.SyncDir(sn.snapshotDir()); err != nil {
		return status.Errorf(codes.Internal, "delete snapshot %s: %v", snapshotID, err)
	}
	sn.store.Lock()
	defer sn.store.Unlock()
	delete(sn.store.Snapshots, id.Name)
	if err := sn.saveLocked(); err != nil {
		return err
	}
	klog.InfoS("deleted snapshot", "snapshot", snapshotID)
	return nil
}

// Filter chooses snapshots for ListSnapshots: by ID, by source volume ID, or all.
type Filter struct {
	ID, Source string
}

// ListSnapshots returns this node's snapshots that pass the filter, in name order: those whose
// names sort after the name after ("" for the start), at most limit of them (0 for all), and
// whether more follow. Snapshots being taken are listed, not ready.
func (sn *Snapshots) ListSnapshots(filter Filter, after string, limit int) (recs []volume.SnapshotRecord, more bool) {
	sn.store.Lock()
	for _, s := range sn.store.Snapshots {
		if s.Name > after && (filter.ID == "" || s.ID == filter.ID) && (filter.Source == "" || s.Source == filter.Source) {
			recs = append(recs, *s)
		}
	}
	sn.store.Unlock()
	slices.SortFunc(recs, func(a, b volume.SnapshotRecord) int { return strings.Compare(a.Name, b.Name) })
	if limit > 0 && len(recs) > limit {
		return recs[:limit], true
	}
	return recs, false
}
