package node

import (
	"fmt"
	"strings"

	"github.com/csi-fat/csi-fat/node/volume"
)

// mismatch says why a medium's vendor, model, serial, by-id or by-path names do not match, or
// "". A device matches a name pattern when one of its names does.
func selectionMismatch(s volume.Selection, d usbDevice) string {
	for _, c := range []struct{ key, pattern, value string }{
		{volume.ParamVendor, s.Vendor, d.Vendor}, {volume.ParamModel, s.Model, d.Model}, {volume.ParamSerial, s.Serial, d.Serial},
	} {
		if c.pattern != "" && !volume.MatchAny([]string{c.pattern}, []string{c.value}) {
			return fmt.Sprintf("%s %q does not match %s=%q", c.key, c.value, c.key, c.pattern)
		}
	}
	for _, c := range []struct {
		key, what, pattern string
		names              []string
	}{
		{volume.ParamByID, "by-id", s.ByID, append([]string{d.ID}, d.ByID...)},
		{volume.ParamByPath, "by-path", s.ByPath, d.ByPath},
	} {
		if c.pattern != "" && !volume.MatchAny([]string{c.pattern}, c.names) {
			if len(c.names) == 0 {
				return fmt.Sprintf("no %s name matches %s=%q (it has none)", c.what, c.key, c.pattern)
			}
			return fmt.Sprintf("no %s name (%s) matches %s=%q", c.what, strings.Join(c.names, ", "), c.key, c.pattern)
		}
	}
	return ""
}

// usbCapacity is the largest volume a CreateVolume with these parameters could make on the
// free sticks: adopting, the largest free FAT partition (or superfloppy) the patterns and the
// partition parameter select; else the largest stick no volume holds any of that is blank or
// holds FAT (without wipe=true), less the first MiB with layout=mbr. Sticks are looked at
// (readMedium, a few KiB of each) largest first.
func (m *Manager) usbCapacity(free []usbDevice, claims map[string]*mediumClaims, params volume.Params) int64 {
	var best int64
	for i := len(free) - 1; i >= 0; i-- {
		d := free[i]
		if selectionMismatch(params.Selection, d) != "" {
			continue
		}
		if !params.Adopt {
			if claims[d.ID] != nil {
				continue
			}
			if params.Wipe {
				return formattedSize(d.Size, params)
			}
			if state, _, _ := m.probeMedium(d); state == mediumFAT || state == mediumBlank {
				return formattedSize(d.Size, params)
			}
			continue
		}
		if d.Size <= best {
			break // a partition is no larger than its device
		}
		probe, err := m.probeDevice(d)
		if err != nil {
			continue
		}
		if !probe.partitioned() {
			if probe.Usable && claims[d.ID] == nil && params.Partition == "" {
				best = max(best, d.Size)
			}
			continue
		}
		for _, p := range probe.FATPartitions {
			if claims[d.ID].partitionVolume(p) == "" && volume.PartitionMismatch(params.Partition, p) == "" {
				best = max(best, p.Size)
			}
		}
	}
	return best
}
