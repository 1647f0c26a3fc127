package volume

import (
	"fmt"
	"strings"
)

// Pool names, as they appear in volume IDs and in the "pool" StorageClass parameter. The
// removable-media pool was first the USB pool: its volume IDs carry usb, and the parameter takes
// media and usb alike.
const (
	PoolImage = "image"
	PoolUSB   = "usb"
	PoolMedia = "media"
)

// Limits on what a volume ID may hold. Names match what Kubernetes generates (pvc-<uuid>) and
// what the CSI spec asks plugins to accept (128 bytes); node IDs are Kubernetes node names (DNS
// subdomains, at most 253 bytes).
const (
	MaxNameLength   = 128
	MaxNodeIDLength = 253
	// MaxVolumeIDLength bounds a whole ID: pool, node and name with their separators.
	MaxVolumeIDLength = len(PoolImage) + 1 + MaxNodeIDLength + 1 + MaxNameLength
)

// ID is what a volume ID carries: the pool the volume lives in, the node it lives on, and
// its name, which is also its file name in the image pool. Its string form is
// "<pool>:<node>:<name>", e.g. "image:worker-1:pvc-0b7c...".
type ID struct {
	Pool string
	Node string
	Name string
}

func (id ID) String() string { return id.Pool + ":" + id.Node + ":" + id.Name }

// ParseID reads and validates an ID. Every part is checked with the rules that keep it
// from naming anything outside the pool: no slashes, no "..", no NUL, nothing overlong.
func ParseID(s string) (ID, error) {
	if s == "" {
		return ID{}, fmt.Errorf("volume ID is empty")
	}
	if len(s) > MaxVolumeIDLength {
		return ID{}, fmt.Errorf("volume ID is %d bytes, more than %d", len(s), MaxVolumeIDLength)
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return ID{}, fmt.Errorf("volume ID %q: want <pool>:<node>:<name>", s)
	}
	id := ID{Pool: parts[0], Node: parts[1], Name: parts[2]}
	if id.Pool != PoolImage && id.Pool != PoolUSB {
		return ID{}, fmt.Errorf("volume ID %q: unknown pool %q", s, id.Pool)
	}
	if err := ValidateNodeID(id.Node); err != nil {
		return ID{}, fmt.Errorf("volume ID %q: %w", s, err)
	}
	if err := ValidateName(id.Name); err != nil {
		return ID{}, fmt.Errorf("volume ID %q: %w", s, err)
	}
	return id, nil
}

// ValidateName checks a volume name: 1 to 128 bytes of letters, digits, '-', '_' and '.', not
// starting with '.' (so neither "." nor ".." nor a hidden file), which makes it a safe single
// path element.
func ValidateName(name string) error {
	return ValidateToken("volume name", name, MaxNameLength)
}

// ValidateNodeID checks a node ID with the same character rules, up to 253 bytes.
func ValidateNodeID(node string) error {
	return ValidateToken("node ID", node, MaxNodeIDLength)
}

func ValidateToken(what, s string, maxLen int) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > maxLen {
		return fmt.Errorf("%s is %d bytes, more than %d", what, len(s), maxLen)
	}
	if s[0] == '.' {
		return fmt.Errorf("%s %q starts with a dot", what, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return fmt.Errorf("%s %q has %q at byte %d; only letters, digits, '-', '_' and '.' are allowed", what, s, c, i)
		}
	}
	return nil
}
