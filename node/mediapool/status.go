package mediapool

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

// Status looks at every device the pool's scan sees: members first (smallest first), then
// the devices it leaves out. Free members are read (a few KiB, layout.Probe) without claiming
// them.
func (pool *Pool) Status() ([]media.Status, error) {
	if pool.cfg == nil {
		return nil, fmt.Errorf("the removable-media pool is not enabled")
	}
	seen, err := pool.cfg.ScanAll()
	if err != nil {
		return nil, err
	}
	claims := pool.claimedMedia()
	claimed := map[string]string{}
	for dev, c := range claims {
		claimed[dev] = c.Whole
		if c.Whole == "" {
			claimed[dev] = c.Volumes()
		}
	}
	out := make([]media.Status, 0, len(seen))
	for _, d := range seen {
		st := media.Status{ID: d.ID, Kernel: d.Kernel, Size: d.Size, Vendor: d.Vendor, Model: d.Model,
			Serial: d.Serial, ByID: d.ByID, ByPath: d.ByPath}
		if st.ID == "" && len(d.ByID) > 0 {
			st.ID = d.ByID[0] // not a member: its name, for the reader
		}
		switch {
		case d.Excluded == media.ExcludedByLists:
			st.State, st.Reason = media.StateDenied, d.Excluded
			if vol := claimed[d.ID]; vol != "" {
				// A volume made before the lists changed keeps its device.
				st.State, st.Volume, st.Reason = media.StateClaimed, vol, "claimed by volume "+vol+" (the allow and deny lists now leave it out)"
			}
		case d.Excluded != "":
			st.State, st.Content, st.Reason = media.StateExcluded, media.ExcludedContent[d.Excluded], d.Excluded
		case claims[d.ID] != nil && claims[d.ID].Whole != "":
			st.State, st.Volume = media.StateClaimed, claimed[d.ID]
			st.Reason = "claimed by volume " + st.Volume
		case claims[d.ID] != nil:
			// Volumes hold some of its partitions: the others may still be adopted.
			st.State, st.Content = media.StateClaimed, "partition"
			st.Reason = "partitions claimed: " + claimed[d.ID]
			st.Partitions = pool.partitionStatus(d.Device, claims[d.ID])
			if free := countFree(st.Partitions); free > 0 {
				st.Reason += fmt.Sprintf("; %d more FAT partitions free for adopt=true", free)
			}
		case d.Busy != "":
			st.State, st.Content, st.Reason = media.StateBusy, "mounted", d.Busy
			if !strings.HasPrefix(d.Busy, "mounted") {
				st.Content = "held"
			}
		default:
			st.State, st.Content, st.Reason = pool.ProbeMedium(d.Device)
			if st.Content == "partition" {
				st.Partitions = pool.partitionStatus(d.Device, nil)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// partitionStatus lists a member's FAT partitions and who holds them.
func (pool *Pool) partitionStatus(d media.Device, claims *Claims) []media.PartitionStatus {
	probe, err := pool.probeDevice(d)
	if err != nil {
		return nil
	}
	var out []media.PartitionStatus
	for _, p := range probe.FATPartitions {
		ps := media.PartitionStatus{Number: p.Number, GUID: p.GUID, Name: p.Name, Type: p.TypeName(), Start: p.Start, Size: p.Size, State: media.StateFAT}
		if v := claims.partitionVolume(p); v != "" {
			ps.State, ps.Volume = media.StateClaimed, v
		}
		out = append(out, ps)
	}
	return out
}

// countFree counts the partitions no volume holds.
func countFree(ps []media.PartitionStatus) int {
	n := 0
	for _, p := range ps {
		if p.State != media.StateClaimed {
			n++
		}
	}
	return n
}

// ProbeMedium names what a free device holds, and why that makes it usable or not.
func (pool *Pool) ProbeMedium(d media.Device) (state, content, reason string) {
	f, err := openRawMedium(d)
	if err != nil {
		return media.StateUnreadable, "", fmt.Sprintf("cannot be opened: %v", err)
	}
	defer f.File.Close()
	pr, err := pool.prober.Look(f, d)
	state, content, reason = describeProbe(pr, err)
	return state, content, reason
}

// describeProbe names a medium's state and content from what prober.Look found.
func describeProbe(pr *prober.Result, err error) (state, content, reason string) {
	const usable = ": adopted by adopt=true, formatted for a new volume"
	if err != nil {
		return media.StateUnreadable, "", fmt.Sprintf("its first sectors cannot be read: %v", err)
	}
	r := pr.Report
	switch {
	case r.Usable && r.FAT.Number == 0:
		return media.StateFAT, "superfloppy", "holds FAT on the whole device" + usable
	case r.Usable && len(pr.FATPartitions) > 1:
		return media.StateFAT, "partition", fmt.Sprintf("holds FAT in %d partitions, each a volume of its own for adopt=true; formatted whole for a new volume", len(pr.FATPartitions))
	case r.Usable:
		return media.StateFAT, "partition", fmt.Sprintf("holds FAT in partition %d (%d bytes at %d)%s", r.FAT.Number, r.FAT.Size, r.FAT.Start, usable)
	case r.Blank:
		return media.StateBlank, "", "blank: formatted for a new volume"
	}
	reason = r.Reason + " (" + volume.ParamWipe + "=true formats it)"
	switch {
	case r.Whole != nil:
		return media.StateForeign, r.Whole.Type, reason
	case r.Layout == nil:
		return media.StateForeign, "invalid_table", reason
	case r.Layout.Kind == layout.MBR || r.Layout.Kind == layout.GPT:
		return media.StateForeign, "partition_table", reason
	}
	return media.StateForeign, "unknown", reason
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
