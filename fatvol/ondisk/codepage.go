package ondisk

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/text/encoding/charmap"
)

// Short names are stored in an OEM code page, chosen at mount time (vfat's codepage= option).
// Linux's default (CONFIG_FAT_DEFAULT_CODEPAGE) is 437, and so is ours. The tables come from
// golang.org/x/text's charmaps, which follow the Unicode Consortium's mappings: 0x00-0x7F are
// ASCII (the glyphs DOS drew for control codes are not part of the mapping, and Linux's nls
// tables agree), and code page 437's table is byte for byte the one Linux's nls_cp437 holds.
//
// Offered: the code pages Linux's vfat offers that x/text has as single-byte tables: 437, 850
// (what Windows in Western Europe and mtools use), 852, 855, 860, 862, 863, 865 and 866. Linux
// also has 737, 775, 857, 861, 864, 869 and 874, which x/text lacks, and the double-byte 932,
// 936, 949 and 950, whose short names hold lead and trail bytes that the 8.3 rules here do not
// handle: those are refused with the list of what is offered.

// DefaultCodePage is the code page of short names when none is chosen.
const DefaultCodePage = 437

var charmaps = map[int]*charmap.Charmap{
	437: charmap.CodePage437, 850: charmap.CodePage850, 852: charmap.CodePage852, 855: charmap.CodePage855,
	860: charmap.CodePage860, 862: charmap.CodePage862, 863: charmap.CodePage863, 865: charmap.CodePage865,
	866: charmap.CodePage866,
}

// CodePage converts short-name bytes to and from Unicode and changes their case within the
// code page. The nil *CodePage is code page 437.
type CodePage struct {
	number int
	decode [256]rune
	encode map[rune]byte
	upper  [256]byte
	lower  [256]byte
}

var codePages = map[int]*CodePage{}

func init() {
	for n, cm := range charmaps {
		codePages[n] = newCodePage(n, cm)
	}
}

func newCodePage(n int, cm *charmap.Charmap) *CodePage {
	c := &CodePage{number: n, encode: map[rune]byte{}}
	for b := 0; b < 256; b++ {
		r := cm.DecodeByte(byte(b))
		c.decode[b] = r
		if b > 0 {
			c.encode[r] = byte(b)
		}
	}
	// Case mapping within the code page: a byte maps to the byte of its Unicode simple case
	// mapping when that character is in the code page, else to itself, and never across the
	// ASCII boundary (Turkish dotless i in 850 stays itself rather than becoming I). On 437
	// this gives Linux's nls_cp437 charset2upper/charset2lower (ü 0x81 -> Ü 0x9A, σ 0xE5 -> Σ
	// 0xE4, while â 0x83 stays because Â is not in code page 437).
	for b := 0; b < 256; b++ {
		c.upper[b], c.lower[b] = byte(b), byte(b)
		if u, ok := c.Encode(unicode.ToUpper(c.decode[b])); ok && (u < 0x80) == (b < 0x80) {
			c.upper[b] = u
		}
		if l, ok := c.Encode(unicode.ToLower(c.decode[b])); ok && (l < 0x80) == (b < 0x80) {
			c.lower[b] = l
		}
	}
	return c
}

// LookupCodePage returns code page n, or an error naming the code pages offered.
func LookupCodePage(n int) (*CodePage, error) {
	if c, ok := codePages[n]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("code page %d is not offered; the code pages are %s", n, CodePageList())
}

// CodePageList lists the code pages offered, for messages and help texts.
func CodePageList() string {
	ns := make([]int, 0, len(codePages))
	for n := range codePages {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

func (c *CodePage) orDefault() *CodePage {
	if c == nil {
		return codePages[DefaultCodePage]
	}
	return c
}

// Number is the code page's number (437 for nil).
func (c *CodePage) Number() int { return c.orDefault().number }

// Decode gives the Unicode character of a byte.
func (c *CodePage) Decode(b byte) rune { return c.orDefault().decode[b] }

// Encode gives the byte of r. NUL has no encoding: like Linux's uni2char it is not a character a
// name can hold.
func (c *CodePage) Encode(r rune) (byte, bool) {
	if r > 0 && r < 0x80 {
		return byte(r), true
	}
	b, ok := c.orDefault().encode[r]
	return b, ok
}

// toUpper and toLower change the case of a byte within the code page (nls_toupper/nls_tolower).
func (c *CodePage) toUpper(b byte) byte { return c.orDefault().upper[b] }
func (c *CodePage) toLower(b byte) byte { return c.orDefault().lower[b] }
