package ondisk

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// The expectations below are the rules of Linux's fs/fat/namei_vfat.c applied by hand:
// vfat_striptail_len, xlate_to_uni (FAT_LFN_LEN = 255) and vfat_is_used_badchars.
func TestCleanName(t *testing.T) {
	cases := []struct {
		in   string
		want string
		err  error
	}{
		{"readme.txt", "readme.txt", nil},
		{"name...", "name", nil},                // trailing dots go
		{"name. .", "", ErrInvalidName},         // "name. " after stripping: trailing space
		{"name ", "", ErrInvalidName},           // trailing space is refused, not stripped
		{" name", " name", nil},                 // leading space is fine
		{".hidden", ".hidden", nil},             // leading dot is fine
		{"a.b.c", "a.b.c", nil},                 // inner dots are fine
		{"", "", ErrInvalidName},                // empty
		{".", "", ErrInvalidName},               // empty once stripped
		{"..", "", ErrInvalidName},              // empty once stripped
		{"...", "", ErrInvalidName},             // empty once stripped
		{"a/b", "", ErrInvalidName},             // vfat_bad_char '/'
		{"a\x00b", "", ErrInvalidName},          // < 0x20
		{"a\tb", "", ErrInvalidName},            // < 0x20
		{"a\x1fb", "", ErrInvalidName},          // < 0x20
		{"a*b", "", ErrInvalidName},             // * ? < > | " : \
		{"a?b", "", ErrInvalidName},             //
		{"a<b", "", ErrInvalidName},             //
		{"a>b", "", ErrInvalidName},             //
		{"a|b", "", ErrInvalidName},             //
		{`a"b`, "", ErrInvalidName},             //
		{"a:b", "", ErrInvalidName},             //
		{`a\b`, "", ErrInvalidName},             //
		{"a+b,c;d=e[f]g", "a+b,c;d=e[f]g", nil}, // only invalid in short names
		{"a\x7fb", "a\x7fb", nil},               // DEL is >= 0x20: allowed
		{"Grüße.txt", "Grüße.txt", nil},
		{"日本語.txt", "日本語.txt", nil},
		{"\xff\xfe", "", ErrInvalidName}, // not UTF-8
		{strings.Repeat("a", 255), strings.Repeat("a", 255), nil},
		{strings.Repeat("a", 256), "", ErrNameTooLong},
		{strings.Repeat("a", 255) + "...", strings.Repeat("a", 255), nil},     // length after stripping
		{strings.Repeat("日", 255), strings.Repeat("日", 255), nil},             // 765 bytes, 255 units
		{strings.Repeat("😀", 127) + "a", strings.Repeat("😀", 127) + "a", nil}, // 255 units
		{strings.Repeat("😀", 128), "", ErrNameTooLong},                        // 256 units
		{strings.Repeat("*", 300), "", ErrNameTooLong},                        // length is checked first
	}
	for _, c := range cases {
		got, err := CleanName(c.in)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("CleanName(%q) = %q, %v; want error %v", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("CleanName(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestErrShortNameTakenIsExist(t *testing.T) {
	if !errors.Is(ErrShortNameTaken, fs.ErrExist) {
		t.Fatal("ErrShortNameTaken does not match fs.ErrExist")
	}
}

func TestFoldName(t *testing.T) {
	same := [][2]string{
		{"readme.txt", "README.TXT"},
		{"ReadMe.Txt", "rEADmE.tXT"},
		{"name...", "NAME"}, // vfat_cmpi compares without trailing dots
		{"Grüße", "GRüßE"},  // ASCII letters fold
	}
	for _, p := range same {
		if FoldName(p[0]) != FoldName(p[1]) {
			t.Errorf("FoldName(%q) != FoldName(%q)", p[0], p[1])
		}
	}
	// Non-ASCII letters do not fold: Linux folds UTF-8 bytes with the iso8859-1 table.
	differ := [][2]string{
		{"ä", "Ä"},
		{"straße", "STRASSE"},
		{"σ", "Σ"},
		{"a b", "ab"},
		{".a", "a"},
	}
	for _, p := range differ {
		if FoldName(p[0]) == FoldName(p[1]) {
			t.Errorf("FoldName(%q) == FoldName(%q), want them different", p[0], p[1])
		}
	}
}

func TestParseShortNameMode(t *testing.T) {
	for _, s := range []string{"lower", "win95", "winnt", "mixed"} {
		m, err := ParseShortNameMode(s)
		if err != nil || m.String() != s {
			t.Errorf("ParseShortNameMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseShortNameMode("upper"); err == nil {
		t.Error("ParseShortNameMode(upper) did not fail")
	}
	var zero ShortNameMode
	if zero != ShortNameMixed {
		t.Error("the zero mode is not mixed, Linux's default")
	}
}
