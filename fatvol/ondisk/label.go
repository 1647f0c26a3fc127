package ondisk

import (
	"errors"
	"fmt"
	"strings"
)

// NoName is what the boot sector holds when the volume has no label.
var NoName = [11]byte{'N', 'O', ' ', 'N', 'A', 'M', 'E', ' ', ' ', ' ', ' '}

// ErrBadLabel reports a label mkfs.fat would refuse.
var ErrBadLabel = errors.New("bad volume label")

// labelForbidden are the characters the FAT specification bans from a label (mkfs.fat's
// validate_volume_label).
const labelForbidden = "\"*+,./:;<=>?[\\]|"

// EncodeLabel turns a label into its 11 space-padded bytes, with mkfs.fat's rules: at most 11
// characters, none forbidden, no leading space. Case is kept (mkfs.fat only warns on lower case).
// Bytes of 0x80 and up are refused: mkfs.fat compares them as signed chars, so it rejects every
// non-ASCII label as "characters below 0x20". An empty or all-space label means no label.
func EncodeLabel(label string) ([11]byte, error) {
	var out [11]byte
	if len(label) > 11 {
		return out, fmt.Errorf("%w %q: longer than 11 characters", ErrBadLabel, label)
	}
	for i := 0; i < len(label); i++ {
		c := label[i]
		if c < 0x20 || c >= 0x80 {
			return out, fmt.Errorf("%w %q: only printable ASCII characters are allowed", ErrBadLabel, label)
		}
		if strings.IndexByte(labelForbidden, c) >= 0 {
			return out, fmt.Errorf("%w %q: characters %s are not allowed", ErrBadLabel, label, labelForbidden)
		}
	}
	if strings.TrimLeft(label, " ") == "" {
		return NoName, nil
	}
	if label[0] == ' ' {
		return out, fmt.Errorf("%w %q: cannot start with a space", ErrBadLabel, label)
	}
	copy(out[:], label)
	for i := len(label); i < 11; i++ {
		out[i] = ' '
	}
	return out, nil
}
