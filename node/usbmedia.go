package node

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/prober"
	"github.com/csi-fat/csi-fat/node/volume"
)

// The removable-media pool's view of each device it looks at, so that why a stick is not used
// shows in the metrics (csi_fat_usb_devices) and on the status page (/media, csi-fat media), not
// only in the logs.
const (
	mediumClaimed    = "claimed"    // a volume has it
	mediumBusy       = "busy"       // the host uses it: mounted (or a partition is), held by device-mapper or md
	mediumFAT        = "fat"        // free, holds FAT (whole, or in a partition): adoptable, and formatted for a new volume
	mediumBlank      = "blank"      // free and blank: formatted for a new volume
	mediumForeign    = "foreign"    // free, holds something else: formatted only with wipe=true
	mediumUnreadable = "unreadable" // free, but its first sectors cannot be read
	mediumDenied     = "denied"     // a member the allow and deny lists leave out
	mediumExcluded   = "excluded"   // not a member: not removable, on no USB or MMC bus, no medium, no identity
)

// excludedContent is the short kind of each reason a device is not a member, for the metric.
var excludedContent = map[string]string{
	media.ExcludedNotWhole:     "partition",
	media.ExcludedNotRemovable: "not_removable",
	media.ExcludedNotOnBus:     "not_on_bus",
	media.ExcludedNoMedium:     "no_medium",
	media.ExcludedNoIdentity:   "no_identity",
}

// MediumStatus is one block device the removable-media pool looked at: who it is, its state and
// what it holds (Content: for fat, superfloppy or partition; for foreign, blkid's type such as
// exfat, ntfs, ext4, crypto_LUKS, or partition_table, invalid_table, unknown; for busy, mounted or
// held; for excluded, the kind of reason), and in a sentence why it is or is not usable.
type MediumStatus struct {
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

// MediaStatus looks at every device the pool's scan sees: members first (smallest first), then
// the devices it leaves out. Free members are read (a few KiB, layout.Probe) without claiming
// them.
func (m *Manager) MediaStatus() ([]MediumStatus, error) {
	if m.usb == nil {
		return nil, fmt.Errorf("the removable-media pool is not enabled")
	}
	seen, err := m.usb.ScanAll()
	if err != nil {
		return nil, err
	}
	claims := m.claimedMedia()
	claimed := map[string]string{}
	for dev, c := range claims {
		claimed[dev] = c.Whole
		if c.Whole == "" {
			claimed[dev] = c.volumes()
		}
	}
	out := make([]MediumStatus, 0, len(seen))
	for _, d := range seen {
		st := MediumStatus{ID: d.ID, Kernel: d.Kernel, Size: d.Size, Vendor: d.Vendor, Model: d.Model,
			Serial: d.Serial, ByID: d.ByID, ByPath: d.ByPath}
		if st.ID == "" && len(d.ByID) > 0 {
			st.ID = d.ByID[0] // not a member: its name, for the reader
		}
		switch {
		case d.Excluded == media.ExcludedByLists:
			st.State, st.Reason = mediumDenied, d.Excluded
			if vol := claimed[d.ID]; vol != "" {
				// A volume made before the lists changed keeps its device.
				st.State, st.Volume, st.Reason = mediumClaimed, vol, "claimed by volume "+vol+" (the allow and deny lists now leave it out)"
			}
		case d.Excluded != "":
			st.State, st.Content, st.Reason = mediumExcluded, excludedContent[d.Excluded], d.Excluded
		case claims[d.ID] != nil && claims[d.ID].Whole != "":
			st.State, st.Volume = mediumClaimed, claimed[d.ID]
			st.Reason = "claimed by volume " + st.Volume
		case claims[d.ID] != nil:
			// Volumes hold some of its partitions: the others may still be adopted.
			st.State, st.Content = mediumClaimed, "partition"
			st.Reason = "partitions claimed: " + claimed[d.ID]
			st.Partitions = m.partitionStatus(d.Device, claims[d.ID])
			if free := countFree(st.Partitions); free > 0 {
				st.Reason += fmt.Sprintf("; %d more FAT partitions free for adopt=true", free)
			}
		case d.Busy != "":
			st.State, st.Content, st.Reason = mediumBusy, "mounted", d.Busy
			if !strings.HasPrefix(d.Busy, "mounted") {
				st.Content = "held"
			}
		default:
			st.State, st.Content, st.Reason = m.probeMedium(d.Device)
			if st.Content == "partition" {
				st.Partitions = m.partitionStatus(d.Device, nil)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// partitionStatus lists a member's FAT partitions and who holds them.
func (m *Manager) partitionStatus(d media.Device, claims *mediumClaims) []PartitionStatus {
	probe, err := m.probeDevice(d)
	if err != nil {
		return nil
	}
	var out []PartitionStatus
	for _, p := range probe.FATPartitions {
		ps := PartitionStatus{Number: p.Number, GUID: p.GUID, Name: p.Name, Type: p.TypeName(), Start: p.Start, Size: p.Size, State: mediumFAT}
		if v := claims.partitionVolume(p); v != "" {
			ps.State, ps.Volume = mediumClaimed, v
		}
		out = append(out, ps)
	}
	return out
}

// countFree counts the partitions no volume holds.
func countFree(ps []PartitionStatus) int {
	n := 0
	for _, p := range ps {
		if p.State != mediumClaimed {
			n++
		}
	}
	return n
}

// probeMedium names what a free device holds, and why that makes it usable or not.
func (m *Manager) probeMedium(d media.Device) (state, content, reason string) {
	f, err := openRawMedium(d)
	if err != nil {
		return mediumUnreadable, "", fmt.Sprintf("cannot be opened: %v", err)
	}
	defer f.File.Close()
	pr, err := m.prober.Look(f, d)
	state, content, reason = describeProbe(pr, err)
	return state, content, reason
}

// describeProbe names a medium's state and content from what prober.Look found.
func describeProbe(pr *prober.Result, err error) (state, content, reason string) {
	const usable = ": adopted by adopt=true, formatted for a new volume"
	if err != nil {
		return mediumUnreadable, "", fmt.Sprintf("its first sectors cannot be read: %v", err)
	}
	r := pr.Report
	switch {
	case r.Usable && r.FAT.Number == 0:
		return mediumFAT, "superfloppy", "holds FAT on the whole device" + usable
	case r.Usable && len(pr.FATPartitions) > 1:
		return mediumFAT, "partition", fmt.Sprintf("holds FAT in %d partitions, each a volume of its own for adopt=true; formatted whole for a new volume", len(pr.FATPartitions))
	case r.Usable:
		return mediumFAT, "partition", fmt.Sprintf("holds FAT in partition %d (%d bytes at %d)%s", r.FAT.Number, r.FAT.Size, r.FAT.Start, usable)
	case r.Blank:
		return mediumBlank, "", "blank: formatted for a new volume"
	}
	reason = r.Reason + " (" + volume.ParamWipe + "=true formats it)"
	switch {
	case r.Whole != nil:
		return mediumForeign, r.Whole.Type, reason
	case r.Layout == nil:
		return mediumForeign, "invalid_table", reason
	case r.Layout.Kind == layout.MBR || r.Layout.Kind == layout.GPT:
		return mediumForeign, "partition_table", reason
	}
	return mediumForeign, "unknown", reason
}

// openRawMedium opens a device for a look at what it holds, without a claim.
func openRawMedium(d media.Device) (layout.FileMedium, error) {
	f, err := os.Open(d.Path)
	if err != nil {
		return layout.FileMedium{}, err
	}
	lbs := 512
	if n, err := unix.IoctlGetUint32(int(f.Fd()), unix.BLKSSZGET); err == nil && n >= 512 {
		lbs = int(n)
	}
	return layout.FileMedium{File: f, Bytes: d.Size, BlockSize: lbs}, nil
}
