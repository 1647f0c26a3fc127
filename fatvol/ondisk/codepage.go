package ondisk

import "unicode"

// Short names are stored in an OEM code page. Linux's default (CONFIG_FAT_DEFAULT_CODEPAGE, the
// codepage= mount option) is 437, and so is ours: the table below is IBM code page 437 as the
// Unicode Consortium's CP437 mapping defines it, where 0x00-0x7F are plain ASCII (the glyphs DOS
// drew for control codes are not part of the mapping, and Linux's nls_cp437 agrees).
var cp437High = [128]rune{
	// 0x80
	'Ç', 'ü', 'é', 'â', 'ä', 'à', 'å', 'ç', 'ê', 'ë', 'è', 'ï', 'î', 'ì', 'Ä', 'Å',
	// 0x90
	'É', 'æ', 'Æ', 'ô', 'ö', 'ò', 'û', 'ù', 'ÿ', 'Ö', 'Ü', '¢', '£', '¥', '₧', 'ƒ',
	// 0xA0
	'á', 'í', 'ó', 'ú', 'ñ', 'Ñ', 'ª', 'º', '¿', '⌐', '¬', '½', '¼', '¡', '«', '»',
	// 0xB0
	'░', '▒', '▓', '│', '┤', '╡', '╢', '╖', '╕', '╣', '║', '╗', '╝', '╜', '╛', '┐',
	// 0xC0
	'└', '┴', '┬', '├', '─', '┼', '╞', '╟', '╚', '╔', '╩', '╦', '╠', '═', '╬', '╧',
	// 0xD0
	'╨', '╤', '╥', '╙', '╘', '╒', '╓', '╫', '╪', '┘', '┌', '█', '▄', '▌', '▐', '▀',
	// 0xE0
	'α', 'ß', 'Γ', 'π', 'Σ', 'σ', 'µ', 'τ', 'Φ', 'Θ', 'Ω', 'δ', '∞', 'φ', 'ε', '∩',
	// 0xF0
	'≡', '±', '≥', '≤', '⌠', '⌡', '÷', '≈', '°', '∙', '·', '√', 'ⁿ', '²', '■', '\u00A0',
}

// The reverse table and the case tables are derived once from cp437High.
var (
	cp437FromRune = map[rune]byte{}
	cp437ToUpper  [256]byte
	cp437ToLower  [256]byte
)

func init() {
	for i, r := range cp437High {
		cp437FromRune[r] = byte(0x80 + i)
	}
	// Case mapping within the code page: a byte maps to the byte of its Unicode simple case
	// mapping when that character is in the code page, else to itself. This gives the same
	// tables as Linux's nls_cp437 charset2upper/charset2lower (e.g. ü 0x81 -> Ü 0x9A,
	// σ 0xE5 -> Σ 0xE4, while â 0x83 stays because Â is not in code page 437).
	for b := 0; b < 256; b++ {
		r := CP437Decode(byte(b))
		cp437ToUpper[b], cp437ToLower[b] = byte(b), byte(b)
		if u, ok := CP437Encode(unicode.ToUpper(r)); ok {
			cp437ToUpper[b] = u
		}
		if l, ok := CP437Encode(unicode.ToLower(r)); ok {
			cp437ToLower[b] = l
		}
	}
}

// CP437Decode gives the Unicode character of a code page 437 byte.
func CP437Decode(b byte) rune {
	if b < 0x80 {
		return rune(b)
	}
	return cp437High[b-0x80]
}

// CP437Encode gives the code page 437 byte of r. NUL has no encoding: like Linux's uni2char it
// is not a character a name can hold.
func CP437Encode(r rune) (byte, bool) {
	if r > 0 && r < 0x80 {
		return byte(r), true
	}
	b, ok := cp437FromRune[r]
	return b, ok
}

// cp437Upper and cp437Lower change the case of a code page 437 byte (nls_toupper/nls_tolower).
func cp437Upper(b byte) byte { return cp437ToUpper[b] }
func cp437Lower(b byte) byte { return cp437ToLower[b] }
