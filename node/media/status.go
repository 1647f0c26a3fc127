package media

import "strconv"

// The removable-media pool's view of each device it looks at, so that why a stick is not used
// shows in the metrics (csi_fat_usb_devices) and on the status page (/media, csi-fat media), not
// only in the logs.
const (
	StateClaimed    = "claimed"    // a volume has it
	StateBusy       = "busy"       // the host uses it: mounted (or a partition is), held by device-mapper or md
	StateFAT        = "fat"        // free, holds FAT (whole, or in a partition): adoptable, and formatted for a new volume
	StateBlank      = "blank"      // free and blank: formatted for a new volume
	StateForeign    = "foreign"    // free, holds something else: formatted only with wipe=true
	StateUnreadable = "unreadable" // free, but its first sectors cannot be read
	StateDenied     = "denied"     // a member the allow and deny lists leave out
	StateExcluded   = "excluded"   // not a member: not removable, on no USB or MMC bus, no medium, no identity
)

// ExcludedContent is the short kind of each reason a device is not a member, for the metric.
var ExcludedContent = map[string]string{
	ExcludedNotWhole:     "partition",
	ExcludedNotRemovable: "not_removable",
	ExcludedNotOnBus:     "not_on_bus",
	ExcludedNoMedium:     "no_medium",
	ExcludedNoIdentity:   "no_identity",
}

// Status is one block device the removable-media pool looked at: who it is, its state and
// what it holds (Content: for fat, superfloppy or partition; for foreign, blkid's type such as
// exfat, ntfs, ext4, crypto_LUKS, or partition_table, invalid_table, unknown; for busy, mounted or
// held; for excluded, the kind of reason), and in a sentence why it is or is not usable.
type Status struct {
	ID      string   `json:"id,omitempty"`
	Kernel  string   `json:"kernel"`
	Size    int64    `json:"size,omitempty"`
	Vendor  string   `json:"vendor,omitempty"`
	Model   string   `json:"model,omitempty"`
	Serial  string   `json:"serial,omitempty"`
	ByID    []string `json:"byId,omitempty"`
	ByPath  []string `json:"byPath,omitempty"`
	State   string   `json:"state"`
	Content string   `json:"content,omitempty"`
	Volume  string   `json:"volume,omitempty"` // the volume ID that claims it
	Reason  string   `json:"reason"`
	// Partitions are the FAT partitions of a partitioned member, each a volume of its own.
	Partitions []PartitionStatus `json:"partitions,omitempty"`
}

// PartitionStatus is one FAT partition of a medium: who it is (its number, and on a GPT its
// unique GUID, by which a volume records it, and its name), where it is, and whether a volume
// has it (State claimed, Volume) or it is free for a volume that adopts (State fat).
type PartitionStatus struct {
	Number int    `json:"number"`
	GUID   string `json:"guid,omitempty"`
	Name   string `json:"name,omitempty"`
	Type   string `json:"type"`
	Start  int64  `json:"start"`
	Size   int64  `json:"size"`
	State  string `json:"state"`
	Volume string `json:"volume,omitempty"`
}

// ID is the partition as a volume records it: a GPT partition's GUID, else its number (as
// layout.Partition.ID has it).
func (p PartitionStatus) ID() string {
	if p.GUID != "" {
		return p.GUID
	}
	return strconv.Itoa(p.Number)
}
