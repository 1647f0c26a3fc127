package media

import (
	"fmt"
	"strings"

	"github.com/csi-fat/csi-fat/node/volume"
)

// mismatch says why a medium's vendor, model, serial, by-id or by-path names do not match, or
// "". A device matches a name pattern when one of its names does.
func Mismatch(s volume.Selection, d Device) string {
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
