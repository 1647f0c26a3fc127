package volume

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// stateVersion is the format of the state file; a file of another version is refused rather
// than misread.
const stateVersion = 1

// Record is a volume that exists on this node.
type Record struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Params  Params    `json:"params"`
	Created time.Time `json:"created"`
	// Device is a USB volume's device, by its stable identity (see media.Device.ID), never a
	// /dev/sdX name, so that it is found again after re-plugging.
	Device string `json:"device,omitempty"`
	// Partition is the partition of Device the volume holds, by its identity on the medium
	// (layout.Partition.ID: a GPT partition's unique GUID, an MBR partition's number); "" claims
	// the whole device, served whole or, when partitioned, in its first FAT partition, as every
	// USB volume was before partitions became volumes of their own (usbpartition.go).
	Partition string `json:"partition,omitempty"`
	// MaxSize is the size the volume's file system can grow to in place (its FATs' room); 0 for
	// USB volumes and images made before growth existed, which do not grow.
	MaxSize int64 `json:"maxSize,omitempty"`
	// Ephemeral marks a CSI ephemeral inline volume: made by NodePublishVolume for one pod and
	// removed by its NodeUnpublishVolume; its ID is the CO's, not of this driver's form.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// Source is the snapshot or volume the volume was made from (its ID), "" for a fresh one.
	Source string `json:"source,omitempty"`
}

// StageRecord is a volume served through FUSE at its staging path.
type StageRecord struct {
	Path       string   `json:"path"`
	ReadOnly   bool     `json:"readOnly,omitempty"`
	MountFlags []string `json:"mountFlags,omitempty"`
	MountGroup string   `json:"mountGroup,omitempty"`
	AccessMode int32    `json:"accessMode"`
	// Mounter is the process serving the volume, when not the plugin's own.
	Mounter *MounterRecord `json:"mounter,omitempty"`
	// Size is the file system's size in bytes once NodeExpandVolume grew it.
	Size int64 `json:"size,omitempty"`
}

// PublishRecord is a bind mount of a staged volume at a target path.
type PublishRecord struct {
	Name     string `json:"name"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// State is everything the node must remember across a restart of the plugin.
type State struct {
	Version   int                       `json:"version"`
	Volumes   map[string]*Record        `json:"volumes"`   // by name
	Staged    map[string]*StageRecord   `json:"staged"`    // by volume name
	Published map[string]*PublishRecord `json:"published"` // by target path

	// Snapshots are the snapshots in the image pool, by name.
	Snapshots map[string]*SnapshotRecord `json:"snapshots,omitempty"`
}

func NewState() *State {
	return &State{
		Version:   stateVersion,
		Volumes:   map[string]*Record{},
		Staged:    map[string]*StageRecord{},
		Published: map[string]*PublishRecord{},

		Snapshots: map[string]*SnapshotRecord{},
	}
}

// targetsOf lists the paths where the named volume is published.
func (s *State) TargetsOf(name string) []string {
	var out []string
	for target, p := range s.Published {
		if p.Name == name {
			out = append(out, target)
		}
	}
	return out
}

// LoadState reads the state file; a missing file is an empty state.
func LoadState(path string) (*State, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return NewState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read node state %s: %w", path, err)
	}
	s := NewState()
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("read node state %s: %w", path, err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("node state %s has version %d; this driver reads version %d", path, s.Version, stateVersion)
	}
	if s.Volumes == nil {
		s.Volumes = map[string]*Record{}
	}
	if s.Staged == nil {
		s.Staged = map[string]*StageRecord{}
	}
	if s.Published == nil {
		s.Published = map[string]*PublishRecord{}
	}
	if s.Snapshots == nil {
		s.Snapshots = map[string]*SnapshotRecord{}
	}
	return s, nil
}

// save writes the state atomically: a new file beside the old one, made durable, renamed over
// it, and the directory made durable, so a crash leaves either the old state or the new one.
func (s *State) Save(path string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("write node state %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write node state %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write node state %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write node state %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write node state %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write node state %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir makes a rename or a removal in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// MounterRecord is the mounter serving a staged volume, in the node state.
type MounterRecord struct {
	PID    int    `json:"pid"`
	Socket string `json:"socket"`
	Log    string `json:"log,omitempty"`
	// A mounter pod's namespace, name and UID.
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	PodUID    string `json:"podUID,omitempty"`
}

// SnapshotRecord is a snapshot in the image pool's snapshots directory: a point-in-time copy of
// a volume of this node (an image volume, or a USB stick: a backup), an image file of its own.
type SnapshotRecord struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Source is the ID of the volume it was taken of, which may be gone since.
	Source string `json:"source"`
	// Size is the source volume's size: the least a volume restored from it has.
	Size int64 `json:"size"`
	// MaxSize is the size the source's file system can grow to in place (Record.MaxSize),
	// which a volume restored from it inherits with the file system; 0 when it cannot grow.
	MaxSize int64     `json:"maxSize,omitempty"`
	Created time.Time `json:"created"`
	// Ready is set once the copy is whole; a snapshot being taken is recorded without it.
	Ready bool `json:"ready"`
}

// StateFile is the node-local state's file name in Config.StateDir.
const StateFile = "state.json"
