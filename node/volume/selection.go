package volume

import (
	"fmt"
	"path"
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

// Selection holds the patterns; "" matches every medium.
type Selection struct {
	Vendor  string `json:"vendor,omitempty"`
	Model   string `json:"model,omitempty"`
	Serial  string `json:"serial,omitempty"`
	ByID    string `json:"byId,omitempty"`
	ByPath  string `json:"byPath,omitempty"`
	FSLabel string `json:"fsLabel,omitempty"`
	// Partition restricts which partition of a partitioned stick an adopting volume takes
	// (parsePartitionSelector, PartitionMismatch).
	Partition string `json:"partition,omitempty"`
}

// set checks and stores one pattern.
func (s *Selection) set(key, pattern string) error {
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

// labelMismatch says why an adopted file system's label does not match, or "".
func (s Selection) LabelMismatch(label string) string {
	if s.FSLabel != "" && !MatchAny([]string{s.FSLabel}, []string{label}) {
		return fmt.Sprintf("file system label %q does not match %s=%q", label, ParamFSLabel, s.FSLabel)
	}
	return ""
}

// addTo puts the patterns into a volume context.
func (s Selection) addTo(m map[string]string) {
	for k, v := range map[string]string{ParamVendor: s.Vendor, ParamModel: s.Model, ParamSerial: s.Serial,
		ParamByID: s.ByID, ParamByPath: s.ByPath, ParamFSLabel: s.FSLabel, ParamPartition: s.Partition} {
		if v != "" {
			m[k] = v
		}
	}
}

func MatchAny(patterns, values []string) bool {
	for _, p := range patterns {
		for _, v := range values {
			if ok, err := path.Match(p, v); err == nil && ok {
				return true
			}
		}
	}
	return false
}
