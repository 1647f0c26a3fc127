package node

import (
	"fmt"
	"path"
	"strings"
)

// StorageClass parameters that choose which medium a volume of the removable-media pool claims:
// shell patterns (as the pool's allow lists take them) on the device's vendor, model and serial,
// its by-id and by-path names (the port it is plugged into), and on the label of the file system
// an adopted stick holds, so that a camera pipeline gets the stick labelled CAM01, or the one in
// the camera's port.
const (
	ParamVendor  = "vendor"
	ParamModel   = "model"
	ParamSerial  = "serial"
	ParamByID    = "byId"
	ParamByPath  = "byPath"
	ParamFSLabel = "fsLabel"
)

// selection holds the patterns; "" matches every medium.
type selection struct {
	Vendor  string `json:"vendor,omitempty"`
	Model   string `json:"model,omitempty"`
	Serial  string `json:"serial,omitempty"`
	ByID    string `json:"byId,omitempty"`
	ByPath  string `json:"byPath,omitempty"`
	FSLabel string `json:"fsLabel,omitempty"`
	// Partition restricts which partition of a partitioned stick an adopting volume takes
	// (parsePartitionSelector, partitionMismatch).
	Partition string `json:"partition,omitempty"`
}

// set checks and stores one pattern.
func (s *selection) set(key, pattern string) error {
	if pattern == "" {
		return fmt.Errorf("want a shell pattern such as CAM* or SanDisk")
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return fmt.Errorf("pattern: %w", err)
	}
	switch key {
	case ParamVendor:
		s.Vendor = pattern
	case ParamModel:
		s.Model = pattern
	case ParamSerial:
		s.Serial = pattern
	case ParamByID:
		s.ByID = pattern
	case ParamByPath:
		s.ByPath = pattern
	case ParamFSLabel:
		s.FSLabel = pattern
	}
	return nil
}

// mismatch says why a medium's vendor, model, serial, by-id or by-path names do not match, or
// "". A device matches a name pattern when one of its names does.
func (s selection) mismatch(d usbDevice) string {
	for _, c := range []struct{ key, pattern, value string }{
		{ParamVendor, s.Vendor, d.Vendor}, {ParamModel, s.Model, d.Model}, {ParamSerial, s.Serial, d.Serial},
	} {
		if c.pattern != "" && !matchAny([]string{c.pattern}, []string{c.value}) {
			return fmt.Sprintf("%s %q does not match %s=%q", c.key, c.value, c.key, c.pattern)
		}
	}
	for _, c := range []struct {
		key, what, pattern string
		names              []string
	}{
		{ParamByID, "by-id", s.ByID, append([]string{d.ID}, d.ByID...)},
		{ParamByPath, "by-path", s.ByPath, d.ByPath},
	} {
		if c.pattern != "" && !matchAny([]string{c.pattern}, c.names) {
			if len(c.names) == 0 {
				return fmt.Sprintf("no %s name matches %s=%q (it has none)", c.what, c.key, c.pattern)
			}
			return fmt.Sprintf("no %s name (%s) matches %s=%q", c.what, strings.Join(c.names, ", "), c.key, c.pattern)
		}
	}
	return ""
}

// labelMismatch says why an adopted file system's label does not match, or "".
func (s selection) labelMismatch(label string) string {
	if s.FSLabel != "" && !matchAny([]string{s.FSLabel}, []string{label}) {
		return fmt.Sprintf("file system label %q does not match %s=%q", label, ParamFSLabel, s.FSLabel)
	}
	return ""
}

// addTo puts the patterns into a volume context.
func (s selection) addTo(m map[string]string) {
	for k, v := range map[string]string{ParamVendor: s.Vendor, ParamModel: s.Model, ParamSerial: s.Serial,
		ParamByID: s.ByID, ParamByPath: s.ByPath, ParamFSLabel: s.FSLabel, ParamPartition: s.Partition} {
		if v != "" {
			m[k] = v
		}
	}
}

// usbCapacity is the largest volume a CreateVolume with these parameters could make on the
// free sticks: adopting, the largest free FAT partition (or superfloppy) the patterns and the
// partition parameter select; else the largest stick no volume holds any of that is blank or
// holds FAT (without wipe=true), less the first MiB with layout=mbr. Sticks are looked at
// (readMedium, a few KiB of each) largest first.
func (m *Manager) usbCapacity(free []usbDevice, claims map[string]*mediumClaims, params Params) int64 {
	var best int64
	for i := len(free) - 1; i >= 0; i-- {
		d := free[i]
		if params.selection.mismatch(d) != "" {
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
			if claims[d.ID].partitionVolume(p) == "" && partitionMismatch(params.Partition, p) == "" {
				best = max(best, p.Size)
			}
		}
	}
	return best
}
