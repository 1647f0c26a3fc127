package ondisk

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"
)

// Errors of the name rules. The engine maps ErrInvalidName to EINVAL, ErrNameTooLong to
// ENAMETOOLONG and ErrShortNameTaken (which is an fs.ErrExist) to EEXIST.
var (
	ErrInvalidName    = errors.New("invalid FAT file name")
	ErrNameTooLong    = errors.New("FAT file name longer than 255 UTF-16 units")
	ErrNoShortName    = errors.New("no free short name for this long name")
	ErrShortNameTaken = fmt.Errorf("the name is already used as a short name: %w", fs.ErrExist)
)

// ShortNameMode selects how short names are created and shown, as Linux's shortname= mount
// option does (fs/fat/inode.c). The zero value is Linux's default, mixed.
type ShortNameMode int

const (
	// ShortNameMixed shows short names like winnt and creates them like win95 (Linux default).
	ShortNameMixed ShortNameMode = iota
	// ShortNameLower shows short names in lower case and creates them like win95.
	ShortNameLower
	// ShortNameWin95 shows short names as stored (upper case) and stores a long name for every
	// name that is not all upper case.
	ShortNameWin95
	// ShortNameWinNT shows and creates names with the NT lower-case bits: an all-lower-case base
	// or extension is stored as a short name alone.
	ShortNameWinNT
)

func (m ShortNameMode) String() string {
	switch m {
	case ShortNameMixed:
		return "mixed"
	case ShortNameLower:
		return "lower"
	case ShortNameWin95:
		return "win95"
	case ShortNameWinNT:
		return "winnt"
	}
	return fmt.Sprintf("ShortNameMode(%d)", int(m))
}

// ParseShortNameMode reads the value of a shortname= option.
func ParseShortNameMode(s string) (ShortNameMode, error) {
	for m := ShortNameMixed; m <= ShortNameWinNT; m++ {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("shortname=%q: want lower, win95, winnt or mixed: %w", s, ErrInvalidName)
}

// createsWinNT reports whether the mode creates names like Windows NT (VFAT_SFN_CREATE_WINNT);
// every other mode creates them like Windows 95.
func (m ShortNameMode) createsWinNT() bool { return m == ShortNameWinNT }

// stripTrailingDots is vfat_striptail_len: Linux drops trailing dots, and only dots, from every
// name it creates or looks up (fs/fat/namei_vfat.c, __vfat_striptail_len). Windows also drops
// trailing spaces; Linux refuses them instead (vfat_is_used_badchars), and so do we.
func stripTrailingDots(name string) string { return strings.TrimRight(name, ".") }

// vfatBadChar is vfat_bad_char: the characters no long name may hold.
func vfatBadChar(r rune) bool {
	return r < 0x20 || strings.ContainsRune(`*?<>|":/\`, r)
}

// CleanName validates a long name the way Linux vfat does when it creates an entry, and returns
// the name as it will be stored:
//   - trailing dots are stripped (vfat_striptail_len; Linux strips dots only, not spaces as
//     Windows does); a name that is then empty ("", ".", "..", "...") is refused (vfat_add_entry
//     gives ENOENT, the VFS never passes "." or ".."; we report ErrInvalidName);
//   - the name must be valid UTF-8 (utf8s_to_utf16s fails on anything else: EINVAL);
//   - more than 255 UTF-16 units is ErrNameTooLong (xlate_to_uni, FAT_LFN_LEN), checked before
//     the characters as Linux does;
//   - control characters (< 0x20, NUL included) and * ? < > | " : / \ are refused, and so is a
//     trailing space (vfat_is_used_badchars).
func CleanName(name string) (string, error) {
	stripped := stripTrailingDots(name)
	if stripped == "" {
		return "", fmt.Errorf("%q: empty once trailing dots are dropped: %w", name, ErrInvalidName)
	}
	if !utf8.ValidString(stripped) {
		return "", fmt.Errorf("%q: not valid UTF-8: %w", name, ErrInvalidName)
	}
	if UTF16Len(stripped) > MaxLFNUnits {
		return "", fmt.Errorf("%q: %w", name, ErrNameTooLong)
	}
	for _, r := range stripped {
		if vfatBadChar(r) {
			return "", fmt.Errorf("%q: character %q is not allowed: %w", name, r, ErrInvalidName)
		}
	}
	if strings.HasSuffix(stripped, " ") {
		return "", fmt.Errorf("%q: ends in a space: %w", name, ErrInvalidName)
	}
	return stripped, nil
}

// FoldName is the key under which a directory compares names: two names are the same entry when
// their keys are equal. It strips trailing dots and folds ASCII letters only.
//
// Why ASCII only: Linux vfat compares names with nls_strnicmp over the iocharset's bytes
// (vfat_cmpi, fat_name_match with the default name_check). With the default iocharset
// (iso8859-1) and utf8=1 - how desktops and udisks mount FAT - the names are UTF-8 bytes folded
// byte by byte with the Latin-1 table; on valid UTF-8 that changes ASCII letters only (a lead
// byte may fold to another lead byte, but the continuation bytes after it then cannot match), so
// "Straße" and "STRASSE" or "ä" and "Ä" are different names, while "readme" and "README" are one.
// (With iocharset=utf8 Linux is fully case-sensitive and warns about it; we do not copy that.)
// Short names need no other key: their displayed form, folded the same way, is compared.
func FoldName(name string) string {
	name = stripTrailingDots(name)
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}
