package ondisk

import (
	"fmt"
	"hash/fnv"
	"strings"
	"unicode/utf16"
)

// Short-name generation follows vfat_create_shortname in Linux's fs/fat/namei_vfat.c; the
// comments name the parts of it that each step reproduces.

const (
	numericTailBase = 6       // "~N" goes after at most 6 base bytes (numtail_baselen)
	numericTails    = 9       // Linux tries ~1 .. ~9 (for (i = 1; i < 10; i++))
	hashedTailBase  = 2       // the hashed form keeps 2 base bytes (numtail2_baselen)
	hashedTries     = 0x10000 // every 4-hex-digit value once; a directory holds fewer entries
)

// caseInfo is Linux's struct shortname_info for the base or the extension: valid while the part
// holds nothing that must be changed to fit an 8.3 name, lower/upper while it could be shown as
// all lower/all upper case.
type caseInfo struct{ lower, upper, valid bool }

// shortNameByte converts one UTF-16 unit of a long name the way to_shortname_char does. It
// returns the byte to store and whether there is one (dots and spaces are dropped).
//
// One deviation: DEL (0x7F) is allowed in long names and Linux copies it into the short name,
// but fsck.fat calls such a short name bad and renames it; we store '_' instead.
func shortNameByte(u uint16, info *caseInfo, cp *CodePage) (byte, bool) {
	switch u {
	case '.', ' ': // vfat_skip_char
		info.valid = false
		return 0, false
	case '[', ']', ';', ',', '+', '=': // vfat_replace_char
		info.valid = false
		return '_', true
	}
	b, ok := cp.Encode(rune(u)) // a lone surrogate never encodes
	if !ok || b == 0x7F {
		info.valid = false
		return '_', true
	}
	if b >= 0x80 { // no case bits can describe a non-ASCII byte
		info.lower, info.upper = false, false
	}
	up := cp.toUpper(b)
	if 'A' <= up && up <= 'Z' {
		if up == b {
			info.lower = false
		} else {
			info.upper = false
		}
	}
	return up, true
}

// MakeShortName decides how a long name is stored in a directory, as Linux's
// vfat_create_shortname does. The name is first checked and cleaned with CleanName.
//
// If the name is an 8.3 name whose case the mode can represent, it is stored as that short name
// alone: needLFN is false and ntCase holds the NT lower-case bits (only winnt mode sets them).
// Upper-case 8.3 names ("README.TXT") always qualify; "readme.txt" only in winnt mode. Whenever
// the name is a valid 8.3 name, in any case and mode, and exists reports that short name as used,
// the error is ErrShortNameTaken, as Linux's -EEXIST (a lookup would find that entry anyway).
// exists tells whether a short name is used in the directory; it must not be nil.
//
// Any other 8.3 name ("readme.txt" outside winnt mode, "ReadMe.txt" in every mode) gets a long
// name and the plain short name README.TXT without a tail (Linux returns before trying tails).
// Everything else gets a long name and a short name with a tail, found with exists:
//   - base: the name up to its last dot, upper-cased in the code page (cp; nil is 437), dots and spaces dropped,
//     [ ] ; , + = and characters outside the code page (each UTF-16 unit) replaced by '_', at
//     most 8 bytes; a name whose only dots lead it ("...test", ".hidden") is all base;
//   - extension: up to 3 bytes after the last dot, converted the same way;
//   - a first byte 0xE5 is stored as 0x05;
//   - tails ~1 .. ~9 after the first 6 base bytes (Linux tries exactly these nine), then the
//     hashed form: the first 2 base bytes, 4 hex digits and "~" plus a digit 1..8. Linux seeds
//     the hex digits and the digit from jiffies; we take them from an FNV-1a hash of the long
//     name, so the result is reproducible (Windows too derives these digits from the name), and
//     like Linux step the value down by 11 on each collision. After all 65536 values it gives up
//     with ErrNoShortName (Linux would loop forever; a directory never holds that many).
//
// Linux's nonumtail mount option (try the plain short name before ~1) is not offered.
func MakeShortName(long string, mode ShortNameMode, cp *CodePage, exists func(ShortName) bool) (sn ShortName, ntCase byte, needLFN bool, err error) {
	name, err := CleanName(long)
	if err != nil {
		return sn, 0, false, err
	}
	units := utf16.Encode([]rune(name))

	// Find the extension: after the last dot, unless only dots and spaces precede that dot.
	baseUnits, extUnits := units, []uint16(nil)
	if dot := lastDot(units); dot >= 0 && dot < len(units)-1 {
		onlySkip := true
		for _, u := range units[:dot] {
			if u != '.' && u != ' ' {
				onlySkip = false
				break
			}
		}
		if !onlySkip {
			baseUnits, extUnits = units[:dot], units[dot+1:]
		}
	}

	isShort := true
	baseInfo := caseInfo{lower: true, upper: true, valid: true}
	extInfo := baseInfo
	var base, ext []byte
	for i, u := range baseUnits {
		b, ok := shortNameByte(u, &baseInfo, cp)
		if !ok {
			continue
		}
		base = append(base, b)
		if len(base) == 8 {
			if i+1 < len(baseUnits) { // anything left over, even a dot or space
				isShort = false
			}
			break
		}
	}
	if len(base) == 0 { // cannot happen for a cleaned name; Linux returns -EINVAL
		return sn, 0, false, fmt.Errorf("%q: no character fits a short name: %w", long, ErrInvalidName)
	}
	for i, u := range extUnits {
		b, ok := shortNameByte(u, &extInfo, cp)
		if !ok {
			continue
		}
		ext = append(ext, b)
		if len(ext) == 3 {
			if i+1 != len(extUnits) {
				isShort = false
			}
			break
		}
	}
	if base[0] == markDeleted {
		base[0] = markKanji
	}

	for i := range sn {
		sn[i] = ' '
	}
	copy(sn[:8], base)
	copy(sn[8:], ext)

	if isShort && baseInfo.valid && extInfo.valid {
		if exists(sn) {
			return sn, 0, false, fmt.Errorf("%q: %w", long, ErrShortNameTaken)
		}
		if !mode.createsWinNT() {
			// Linux returns (upper && upper) here: a lower- or mixed-case 8.3 name gets a long
			// name and the plain short name, with no tail.
			return sn, 0, !(baseInfo.upper && extInfo.upper), nil
		} else {
			if (baseInfo.upper || baseInfo.lower) && (extInfo.upper || extInfo.lower) {
				if !baseInfo.upper && baseInfo.lower {
					ntCase |= CaseLowerBase
				}
				if !extInfo.upper && extInfo.lower {
					ntCase |= CaseLowerExt
				}
				return sn, ntCase, false, nil
			}
			return sn, 0, true, nil
		}
	}

	// Numeric tails.
	baseLen := len(base)
	if baseLen > numericTailBase {
		baseLen = numericTailBase
		sn[7] = ' '
	}
	sn[baseLen] = '~'
	for i := 1; i <= numericTails; i++ {
		sn[baseLen+1] = byte('0' + i)
		if !exists(sn) {
			return sn, 0, true, nil
		}
	}

	// Hashed tails.
	h := fnv.New32a()
	for _, u := range units {
		h.Write([]byte{byte(u), byte(u >> 8)})
	}
	sum := h.Sum32()
	value := uint16(sum)
	if baseLen > hashedTailBase {
		baseLen = hashedTailBase
		sn[7] = ' '
	}
	sn[baseLen+4] = '~'
	sn[baseLen+5] = byte('1' + (sum>>16)&7)
	const hexDigits = "0123456789ABCDEF"
	for range hashedTries {
		for d := 0; d < 4; d++ {
			sn[baseLen+d] = hexDigits[value>>(12-4*d)&0xF]
		}
		if !exists(sn) {
			return sn, 0, true, nil
		}
		value -= 11
	}
	return ShortName{}, 0, false, fmt.Errorf("%q: %w", long, ErrNoShortName)
}

func lastDot(units []uint16) int {
	for i := len(units) - 1; i >= 0; i-- {
		if units[i] == '.' {
			return i
		}
	}
	return -1
}

// DisplayName gives the name Linux shows for a short entry that has no long name
// (fat_parse_short in fs/fat/dir.c): base and extension with their trailing spaces dropped,
// joined by a dot when the extension is not empty, a first byte 0x05 shown as 0xE5, bytes decoded
// from the code page cp (nil is 437), and a NUL ending the base or extension early. Case, by mode:
//   - lower: always lower case (VFAT_SFN_DISPLAY_LOWER);
//   - win95: as stored, the NT case bits are ignored (VFAT_SFN_DISPLAY_WIN95);
//   - winnt and mixed: lower case where ntCase has CaseLowerBase / CaseLowerExt.
//
// A name of spaces only gives "", which Linux skips when listing.
func (s ShortName) DisplayName(ntCase byte, mode ShortNameMode, cp *CodePage) string {
	work := s
	if work[0] == markKanji {
		work[0] = markDeleted
	}
	lowerBase := mode == ShortNameLower || (mode != ShortNameWin95 && ntCase&CaseLowerBase != 0)
	lowerExt := mode == ShortNameLower || (mode != ShortNameWin95 && ntCase&CaseLowerExt != 0)
	base := displayPart(work[:8], lowerBase, cp)
	ext := displayPart(work[8:], lowerExt, cp)
	if ext == "" {
		return base
	}
	return base + "." + ext
}

func displayPart(p []byte, lower bool, cp *CodePage) string {
	var out []rune
	keep := 0
	for _, c := range p {
		if c == 0 {
			break
		}
		if lower {
			c = cp.toLower(c)
		}
		out = append(out, cp.Decode(c))
		if c != ' ' {
			keep = len(out)
		}
	}
	return string(out[:keep])
}

// ParseShortName turns a typed 8.3 name into the ShortName it stands for: trailing dots dropped,
// a base of 1-8 and an optional extension of 1-3 characters of the code page cp (nil is 437), ASCII letters
// upper-cased, a first 0xE5 stored as 0x05; the result must be Valid. It reports false for
// anything else. Non-ASCII letters are taken as typed, so a lookup by short name matches Linux's
// (which compares the displayed short name, NT case bits applied) for ASCII names.
func ParseShortName(name string, cp *CodePage) (ShortName, bool) {
	var sn ShortName
	name = stripTrailingDots(name)
	base, ext, hasExt := strings.Cut(name, ".")
	if strings.HasSuffix(base, " ") || (hasExt && (ext == "" || strings.HasSuffix(ext, " "))) {
		return sn, false
	}
	for i := range sn {
		sn[i] = ' '
	}
	if !putShortPart(sn[:8], base, cp) || !putShortPart(sn[8:], ext, cp) || base == "" {
		return sn, false
	}
	if sn[0] == markDeleted {
		sn[0] = markKanji
	}
	return sn, sn.Valid()
}

func putShortPart(dst []byte, s string, cp *CodePage) bool {
	n := 0
	for _, r := range s {
		b, ok := cp.Encode(r)
		if !ok || n == len(dst) {
			return false
		}
		if 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		dst[n] = b
		n++
	}
	return true
}

// Valid tells whether the stored bytes form an acceptable short name, by the rules of fsck.fat
// (dosfstools check.c, bad_name): no byte below 0x20 except a first 0x05, no 0x7F, none of
// * ? < > | " \ / : and no dot, and no leading space. Bytes 0x80 and up are valid (code page
// characters), and so are embedded spaces and lower-case letters, which fsck.fat accepts too.
// A first byte 0xE5 (deleted) or 0x00 (end) is not a name. The entries "." and ".." are not
// valid names; check them as the dot entries they are.
func (s ShortName) Valid() bool {
	if s[0] == ' ' || s[0] == markDeleted {
		return false
	}
	for i, c := range s {
		if (c < 0x20 && !(i == 0 && c == markKanji)) || c == 0x7F {
			return false
		}
		if strings.IndexByte(`*?<>|"\/:.`, c) >= 0 {
			return false
		}
	}
	return true
}

// String shows the stored bytes as "BASE.EXT" without any case change, for messages.
func (s ShortName) String() string { return s.DisplayName(0, ShortNameWin95, nil) }
