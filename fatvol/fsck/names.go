package fsck

import (
	"fmt"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// noShortName is the bit in the NT case byte that patched Linux kernels and some encryption
// tools set on entries whose 11 name bytes are not a real 8.3 name (fsck.fat's FAT_NO_83NAME).
const noShortName = 0x20

// badShortName applies fsck.fat's bad_name rules to an entry: control characters, 0x7F, the
// characters *?<>|"\/:. anywhere, a leading space, and the no-8.3-name flag without a long
// name. Bytes >= 0x80 are valid code-page characters.
func badShortName(name ondisk.ShortName, ntCase uint8, hasLFN bool) bool {
	if ntCase&noShortName != 0 {
		return !hasLFN
	}
	for i, b := range name {
		if (b < ' ' && !(i == 0 && b == 0x05)) || b == 0x7F {
			return true
		}
		if strings.IndexByte(`*?<>|"\/:.`, b) >= 0 {
			return true
		}
	}
	return name[0] == ' '
}

// displayShortName renders an 8.3 name as NAME.EXT, honouring the NT lowercase bits and
// escaping bytes that are not printable ASCII.
func displayShortName(name ondisk.ShortName, ntCase uint8) string {
	n := name
	if n[0] == 0x05 {
		n[0] = 0xE5
	}
	part := func(p []byte, lower bool) string {
		end := len(p)
		for end > 0 && p[end-1] == ' ' {
			end--
		}
		var b strings.Builder
		for _, ch := range p[:end] {
			switch {
			case ch < 0x20 || ch >= 0x7F:
				fmt.Fprintf(&b, `\x%02x`, ch)
			case lower && ch >= 'A' && ch <= 'Z':
				b.WriteByte(ch + 'a' - 'A')
			default:
				b.WriteByte(ch)
			}
		}
		return b.String()
	}
	base := part(n[:8], ntCase&ondisk.CaseLowerBase != 0)
	ext := part(n[8:], ntCase&ondisk.CaseLowerExt != 0)
	if ext == "" {
		return base
	}
	return base + "." + ext
}

// labelInvalid is fsck.fat's validate_volume_label without the lowercase test (which only
// matters with -U). Bytes >= 0x80 count as invalid because fsck.fat compares a signed char
// with 0x20; agreeing with the installed fsck.fat matters more here than the intent.
func labelInvalid(l ondisk.ShortName) bool {
	for _, b := range l {
		if b < 0x20 || b >= 0x80 {
			return true
		}
		switch {
		case b == 0x22, b >= 0x2A && b <= 0x2C, b == 0x2E, b == 0x2F,
			b >= 0x3A && b <= 0x3F, b >= 0x5B && b <= 0x5D, b == 0x7C:
			return true
		}
	}
	return l[0] == ' ' // also covers an all-space label
}

// prettyLabel renders a label for messages: trailing spaces removed, unprintable bytes escaped.
func prettyLabel(l ondisk.ShortName) string {
	end := len(l)
	for end > 0 && l[end-1] == ' ' {
		end--
	}
	var b strings.Builder
	for _, ch := range l[:end] {
		if ch < 0x20 || ch >= 0x7F {
			fmt.Fprintf(&b, `\x%02x`, ch)
		} else {
			b.WriteByte(ch)
		}
	}
	return b.String()
}

// noName is the boot-sector label that means "no label".
var noName = ondisk.ShortName{'N', 'O', ' ', 'N', 'A', 'M', 'E', ' ', ' ', ' ', ' '}
