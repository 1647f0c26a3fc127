package node

import (
	"fmt"
	"path"
)

// StorageClass parameters that choose which stick a USB volume claims: shell patterns (as the
// pool's allow lists take them) on the device's vendor, model and serial, and on the label of the
// file system an adopted stick holds, so that a camera pipeline gets the stick labelled CAM01.
const (
	ParamVendor  = "vendor"
	ParamModel   = "model"
	ParamSerial  = "serial"
	ParamFSLabel = "fsLabel"
)

// selection holds the patterns; "" matches every stick.
type selection struct {
	Vendor  string `json:"vendor,omitempty"`
	Model   string `json:"model,omitempty"`
	Serial  string `json:"serial,omitempty"`
	FSLabel string `json:"fsLabel,omitempty"`
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
	case ParamFSLabel:
		s.FSLabel = pattern
	}
	return nil
}

// mismatch says why a stick's vendor, model or serial does not match, or "".
func (s selection) mismatch(d usbDevice) string {
	for _, c := range []struct{ key, pattern, value string }{
		{ParamVendor, s.Vendor, d.Vendor}, {ParamModel, s.Model, d.Model}, {ParamSerial, s.Serial, d.Serial},
	} {
		if c.pattern != "" && !matchAny([]string{c.pattern}, []string{c.value}) {
			return fmt.Sprintf("%s %q does not match %s=%q", c.key, c.value, c.key, c.pattern)
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
	for k, v := range map[string]string{ParamVendor: s.Vendor, ParamModel: s.Model, ParamSerial: s.Serial, ParamFSLabel: s.FSLabel} {
		if v != "" {
			m[k] = v
		}
	}
}

// usbCapacity is the largest free stick a CreateVolume with these parameters could claim: one
// the patterns select that holds FAT when adopting, and without wipe=true one that is blank or
// holds FAT (layout.Probe, a few KiB of each stick looked at, largest first).
func usbCapacity(free []usbDevice, params Params) int64 {
	for i := len(free) - 1; i >= 0; i-- {
		d := free[i]
		if params.selection.mismatch(d) != "" {
			continue
		}
		if params.Wipe {
			return d.Size
		}
		state, _ := probeMedium(d)
		if state == mediumFAT || (state == mediumBlank && !params.Adopt) {
			return d.Size
		}
	}
	return 0
}
