package node

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

// snapshotsDir is the image pool's subdirectory of snapshots.
const snapshotsDir = "snapshots"

func (m *Manager) snapshotDir() string { return filepath.Join(m.cfg.PoolDir, snapshotsDir) }

func (m *Manager) snapshotPath(name string) string {
	return filepath.Join(m.snapshotDir(), name+imagepool.ImageSuffix)
}

func (m *Manager) snapshotCreatingPath(name string) string {
	return filepath.Join(m.snapshotDir(), "."+name+imagepool.ImageSuffix+imagepool.CreatingSuffix)
}

// snapshotLock is the lock name of a snapshot: apart from volume names, which have no '/'.
func snapshotLock(name string) string { return "snapshot/" + name }

// opRestore is what holds a snapshot's lock while a volume is restored from it.
const opRestore = "CreateVolume from it"

// lockSnapshot takes a snapshot's lock for op. While another operation holds it, the answer is
// Aborted, as for a volume, but for a DeleteSnapshot while a volume is restored from the
// snapshot: then the snapshot is in use, FailedPrecondition as the spec has it.
func (m *Manager) lockSnapshot(name, op string) (func(), error) {
	key := snapshotLock(name)
	if ok, holder := m.locks.TryLock(key, op); !ok {
		if op == "DeleteSnapshot" && holder == opRestore {
			return nil, status.Errorf(codes.FailedPrecondition, "snapshot %s is in use: a volume is being restored from it; delete it once that is done", name)
		}
		return nil, status.Errorf(codes.Aborted, "an operation on snapshot %s is in flight: %s", name, holder)
	}
	return func() { m.locks.Unlock(key) }, nil
}

// dropUnfinishedSnapshots removes what a crash left of snapshots being taken: their half-made
// copies and their records, which are not ready.
func (m *Manager) dropUnfinishedSnapshots() error {
	left, err := filepath.Glob(filepath.Join(m.snapshotDir(), ".*"+imagepool.ImageSuffix+imagepool.CreatingSuffix))
	if err != nil {
		return err
	}
	for _, f := range left {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("snapshots: remove half-made copy: %w", err)
		}
	}
	m.store.Lock()
	defer m.store.Unlock()
	changed := false
	for name, s := range m.store.Snapshots {
		if !s.Ready {
			klog.InfoS("dropping a snapshot whose copy did not finish", "snapshot", s.ID)
			delete(m.store.Snapshots, name)
			changed = true
		}
	}
	if changed {
		return m.saveLocked()
	}
	return nil
}

// ownSnapshotID parses a snapshot ID of this node: NotFound for any ID this node could never have
// issued (another form, another node), InvalidArgument for an empty one.
func (m *Manager) ownSnapshotID(snapshotID string) (volume.SnapshotID, error) {
	if snapshotID == "" {
		return volume.SnapshotID{}, status.Error(codes.InvalidArgument, "snapshot ID is missing")
	}
	id, err := volume.ParseSnapshotID(snapshotID)
	if err != nil {
		return volume.SnapshotID{}, status.Errorf(codes.NotFound, "snapshot %q does not exist: %v", snapshotID, err)
	}
	if id.Node != m.cfg.NodeID {
		return id, status.Errorf(codes.NotFound, "snapshot %s lives on node %s, this is node %s", snapshotID, id.Node, m.cfg.NodeID)
	}
	return id, nil
}

// snapshot returns a copy of the ready snapshot's record, or NotFound.
func (m *Manager) snapshot(id volume.SnapshotID) (volume.SnapshotRecord, error) {
	m.store.Lock()
	defer m.store.Unlock()
	s, ok := m.store.Snapshots[id.Name]
	if !ok || s.ID != id.String() || !s.Ready {
		return volume.SnapshotRecord{}, status.Errorf(codes.NotFound, "snapshot %s does not exist", id)
	}
	return *s, nil
}

// CreateSnapshot takes a snapshot of the volume sourceID under name, or returns the snapshot of
// that name when it was taken of the same volume (AlreadyExists for another). The copy is made
// before it returns, so the snapshot is ready then.
func (m *Manager) CreateSnapshot(ctx context.Context, name, sourceID string) (volume.SnapshotRecord, error) {
	if err := volume.ValidateToken("snapshot name", name, volume.MaxNameLength); err != nil {
		return volume.SnapshotRecord{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if sourceID == "" {
		return volume.SnapshotRecord{}, status.Error(codes.InvalidArgument, "source volume ID is missing")
	}
	unlock, err := m.lockSnapshot(name, "CreateSnapshot")
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	defer unlock()
	m.store.Lock()
	existing := m.store.Snapshots[name]
	m.store.Unlock()
	if existing != nil {
		if existing.Source != sourceID {
			return volume.SnapshotRecord{}, status.Errorf(codes.AlreadyExists, "snapshot %s exists of volume %s, not of %s", existing.ID, existing.Source, sourceID)
		}
		return *existing, nil
	}
	vid, err := m.ownID(sourceID)
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	rec, err := m.record(vid)
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	if rec.Ephemeral {
		return volume.SnapshotRecord{}, status.Errorf(codes.NotFound, "volume %s is an inline volume of a pod, not one the controller knows", sourceID)
	}
	unlockSource, err := m.lock(vid.Name, "CreateSnapshot")
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	defer unlockSource()

	m.provision.Lock()
	defer m.provision.Unlock()
	budget, err := m.copyBudget(rec)
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	length, err := m.copyLength(rec)
	if err != nil {
		return volume.SnapshotRecord{}, err
	}
	snap := volume.SnapshotRecord{
		ID:      volume.SnapshotID{Node: m.cfg.NodeID, Name: name}.String(),
		Name:    name,
		Source:  rec.ID,
		Size:    length,
		MaxSize: rec.MaxSize,
		Created: time.Now().UTC(),
	}
	// Recorded before the copy, not ready: ListSnapshots shows it as it is taken.
	if err := m.putSnapshot(&snap); err != nil {
		return volume.SnapshotRecord{}, err
	}
	how, err := makeCopy(m.snapshotCreatingPath(name), m.snapshotPath(name), length, func(dst *os.File) (copied, error) {
		return m.copyVolume(rec, dst, budget)
	})
	if err != nil {
		m.dropSnapshot(name)
		return volume.SnapshotRecord{}, err
	}
	snap.Ready = true
	if err := m.putSnapshot(&snap); err != nil {
		os.Remove(m.snapshotPath(name))
		m.dropSnapshot(name)
		return volume.SnapshotRecord{}, err
	}
	klog.InfoS("took snapshot", "snapshot", snap.ID, "volume", rec.ID, "size", rec.Size, "reflink", how.Reflinked, "written", how.Written, "held", how.held)
	return snap, nil
}

// copyBudget checks that the image pool has room for a copy of the volume (what its image holds;
// a stick's content is not known before it is read) and returns the room there is, which bounds
// the copy.
func (m *Manager) copyBudget(rec volume.Record) (int64, error) {
	avail, err := m.imageCapacity()
	if err != nil {
		return 0, status.Error(codes.Internal, err.Error())
	}
	if rec.Device == "" {
		need := rec.Size - m.images.Unwritten(rec.Name, rec.Size)
		if need > avail {
			return 0, status.Errorf(codes.ResourceExhausted, "image pool %s has room for %d bytes, a copy of volume %s needs %d", m.images.Dir, avail, rec.ID, need)
		}
	}
	if avail == 0 {
		return 0, status.Errorf(codes.ResourceExhausted, "image pool %s has no room left", m.images.Dir)
	}
	return avail, nil
}

// makeCopy makes a file at final of size bytes: fill copies into a new file at tmp, which is grown
// to size (sparse: what lies past the copy is a hole; the file system in it stays as it was) and
// renamed to final, and the rename made durable. Nothing is left at tmp or final on failure.
func makeCopy(tmp, final string, size int64, fill func(dst *os.File) (copied, error)) (copied, error) {
	if err := os.MkdirAll(filepath.Dir(tmp), 0o700); err != nil {
		return copied{}, status.Errorf(codes.Internal, "image pool: %v", err)
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return copied{}, status.Errorf(codes.Internal, "image pool: %v", err)
	}
	dst, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return copied{}, status.Errorf(codes.Internal, "image pool: %v", err)
	}
	how, err := fill(dst)
	if err == nil {
		if st, serr := dst.Stat(); serr != nil || st.Size() > size {
			err = status.Errorf(codes.Internal, "image pool: %s is not the copy it should be (%v)", tmp, serr)
		} else if st.Size() < size {
			if terr := dst.Truncate(size); terr != nil {
				err = status.Errorf(codes.Internal, "image pool: grow %s to %d bytes: %v", tmp, size, terr)
			}
		}
	}
	if err == nil {
		// The copy's writes reach the disk now, after any hold of its source.
		if serr := dst.Sync(); serr != nil {
			err = status.Errorf(codes.Internal, "image pool: %v", serr)
		}
	}
	if cerr := dst.Close(); err == nil && cerr != nil {
		err = status.Errorf(codes.Internal, "image pool: %v", cerr)
	}
	if err == nil {
		if rerr := os.Rename(tmp, final); rerr != nil {
			err = status.Errorf(codes.Internal, "image pool: %v", rerr)
		} else if serr := volume.SyncDir(filepath.Dir(final)); serr != nil {
			os.Remove(final)
			err = status.Errorf(codes.Internal, "image pool: %v", serr)
		}
	}
	if err != nil {
		os.Remove(tmp)
		return copied{}, err
	}
	return how, nil
}

func (m *Manager) putSnapshot(s *volume.SnapshotRecord) error {
	m.store.Lock()
	defer m.store.Unlock()
	old := m.store.Snapshots[s.Name]
	c := *s
	m.store.Snapshots[s.Name] = &c
	if err := m.saveLocked(); err != nil {
		if old != nil {
			m.store.Snapshots[s.Name] = old
		} else {
			delete(m.store.Snapshots, s.Name)
		}
		return err
	}
	return nil
}

func (m *Manager) dropSnapshot(name string) {
	m.store.Lock()
	defer m.store.Unlock()
	delete(m.store.Snapshots, name)
	if err := m.saveLocked(); err != nil {
		klog.ErrorS(err, "dropping the record of a snapshot that failed", "snapshot", name)
	}
}

// DeleteSnapshot removes a snapshot. One that does not exist is already deleted, and so is one
// whose ID this driver could never have issued; another node's is refused, since only that
// node can delete it. Volumes restored from a snapshot are copies of their own: deleting it
// takes nothing from them.
func (m *Manager) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if snapshotID == "" {
		return status.Error(codes.InvalidArgument, "snapshot ID is missing")
	}
	id, err := volume.ParseSnapshotID(snapshotID)
	if err != nil {
		klog.V(2).InfoS("deleting a snapshot whose ID this driver never issues: nothing to do", "snapshot", snapshotID, "reason", err)
		return nil
	}
	if id.Node != m.cfg.NodeID {
		return status.Errorf(codes.InvalidArgument, "snapshot %s lives on node %s; this is node %s, whose controller deletes only its own snapshots", snapshotID, id.Node, m.cfg.NodeID)
	}
	unlock, err := m.lockSnapshot(id.Name, "DeleteSnapshot")
	if err != nil {
		return err
	}
	defer unlock()
	m.store.Lock()
	s := m.store.Snapshots[id.Name]
	m.store.Unlock()
	if s == nil || s.ID != snapshotID {
		return nil
	}
	if err := os.Remove(m.snapshotPath(id.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "delete snapshot %s: %v", snapshotID, err)
	}
	if err := volume.SyncDir(m.snapshotDir()); err != nil {
		return status.Errorf(codes.Internal, "delete snapshot %s: %v", snapshotID, err)
	}
	m.store.Lock()
	defer m.store.Unlock()
	delete(m.store.Snapshots, id.Name)
	if err := m.saveLocked(); err != nil {
		return err
	}
	klog.InfoS("deleted snapshot", "snapshot", snapshotID)
	return nil
}

// SnapshotFilter chooses snapshots for ListSnapshots: by ID, by source volume ID, or all.
type SnapshotFilter struct {
	ID, Source string
}

// ListSnapshots returns this node's snapshots that pass the filter, in name order: those whose
// names sort after the name after ("" for the start), at most limit of them (0 for all), and
// whether more follow. Snapshots being taken are listed, not ready.
func (m *Manager) ListSnapshots(filter SnapshotFilter, after string, limit int) (recs []volume.SnapshotRecord, more bool) {
	m.store.Lock()
	for _, s := range m.store.Snapshots {
		if s.Name > after && (filter.ID == "" || s.ID == filter.ID) && (filter.Source == "" || s.Source == filter.Source) {
			recs = append(recs, *s)
		}
	}
	m.store.Unlock()
	slices.SortFunc(recs, func(a, b volume.SnapshotRecord) int { return strings.Compare(a.Name, b.Name) })
	if limit > 0 && len(recs) > limit {
		return recs[:limit], true
	}
	return recs, false
}
