package ondisk

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

func sn(s string) ShortName {
	var n ShortName
	copy(n[:], s)
	return n
}

func noneExist(ShortName) bool { return false }

// linuxShortNameCases are worked out by hand from vfat_create_shortname and to_shortname_char
// (fs/fat/namei_vfat.c) with Linux's cp437 tables. mtools says whether mcopy (with codepage 437)
// makes the same entry; where it does not, why says which rule differs.
var linuxShortNameCases = []struct {
	long    string
	mode    ShortNameMode
	want    ShortName
	ntCase  byte
	needLFN bool
	mtools  bool
	why     string
}{
	{"README.TXT", ShortNameMixed, sn("README  TXT"), 0, false, true, ""},
	// win95 creation stores only all-upper 8.3 names alone; any other 8.3 name gets a long
	// name and the plain short name, no tail (vfat_create_shortname returns upper && upper
	// before the tail loop).
	{"readme.txt", ShortNameMixed, sn("README  TXT"), 0, true, false,
		"mtools stores lower-case 8.3 names with the NT case bits, as Linux's winnt mode does"},
	{"readme.txt", ShortNameWin95, sn("README  TXT"), 0, true, false, "as above"},
	{"readme.txt", ShortNameLower, sn("README  TXT"), 0, true, false, "as above"},
	{"readme.txt", ShortNameWinNT, sn("README  TXT"), CaseLowerBase | CaseLowerExt, false, true, ""},
	{"README.txt", ShortNameWinNT, sn("README  TXT"), CaseLowerExt, false, true, ""},
	{"readme.TXT", ShortNameWinNT, sn("README  TXT"), CaseLowerBase, false, true, ""},
	{"ReadMe.txt", ShortNameMixed, sn("README  TXT"), 0, true, true, ""},
	// winnt: an 8.3 name in mixed case returns 0 before the tail loop: plain short name + LFN.
	{"ReadMe.txt", ShortNameWinNT, sn("README  TXT"), 0, true, true, ""},
	{"a.b.c", ShortNameMixed, sn("AB~1    C  "), 0, true, true, ""},
	// Only dots before the last dot: no extension, the whole name is the base.
	{".hidden", ShortNameMixed, sn("HIDDEN~1   "), 0, true, true, ""},
	{"...test", ShortNameMixed, sn("TEST~1     "), 0, true, true, ""},
	{"name with spaces.txt", ShortNameMixed, sn("NAMEWI~1TXT"), 0, true, true, ""},
	{"a b.txt", ShortNameMixed, sn("AB~1    TXT"), 0, true, true, ""},
	{"verylongname.html", ShortNameMixed, sn("VERYLO~1HTM"), 0, true, true, ""},
	{"ABCDEFGHI.TXT", ShortNameMixed, sn("ABCDEF~1TXT"), 0, true, true, ""},
	{"x.jpeg", ShortNameMixed, sn("X~1     JPE"), 0, true, true, ""},
	// Trailing dots are stripped first (vfat_striptail_len), leaving an 8.3 name.
	{"NAME...", ShortNameMixed, sn("NAME       "), 0, false, false,
		"mtools keeps the trailing dots in a long name and gives NAME~1"},
	{"name...", ShortNameWinNT, sn("NAME       "), CaseLowerBase, false, false, "as above"},
	{"a+b,c;d=e[f]g.txt", ShortNameMixed, sn("A_B_C_~1TXT"), 0, true, true, ""},
	{"A+B.TXT", ShortNameMixed, sn("A_B~1   TXT"), 0, true, true, ""},
	// Bytes >= 0x7F clear both case flags: never a short name alone.
	{"Grüße.txt", ShortNameMixed, sn("GR\x9a\xe1E   TXT"), 0, true, true, ""},
	{"Grüße.txt", ShortNameWinNT, sn("GR\x9a\xe1E   TXT"), 0, true, true, ""},
	{"GRÜSSE.TXT", ShortNameMixed, sn("GR\x9aSSE  TXT"), 0, true, false,
		"mtools stores an upper-case name with code page letters as a short name alone"},
	// Characters outside code page 437 become '_', one per UTF-16 unit.
	{"日本語.txt", ShortNameMixed, sn("___~1   TXT"), 0, true, false,
		"mtools stores ___.TXT without a tail"},
	{"😀.txt", ShortNameMixed, sn("__~1    TXT"), 0, true, false, "mtools uses one '_' per character"},
	// σ is 0xE5 in code page 437, but Linux upper-cases it to Σ 0xE4 (nls_cp437 charset2upper),
	// so the 0xE5 -> 0x05 rule cannot trigger with this code page.
	{"σ.txt", ShortNameMixed, sn("\xe4       TXT"), 0, true, false,
		"mtools stores Σ.TXT with the NT lower-case bits and no long name"},
	{"σ.txt", ShortNameWinNT, sn("\xe4       TXT"), 0, true, false, "as above"},
	// DEL: our one deviation from Linux, which would store 0x7F (fsck.fat renames such names);
	// mtools replaces it too.
	{"a\x7f.txt", ShortNameMixed, sn("A_~1    TXT"), 0, true, true, ""},
}

func TestMakeShortNameLinuxRules(t *testing.T) {
	for _, c := range linuxShortNameCases {
		got, nt, lfn, err := MakeShortName(c.long, c.mode, nil, noneExist)
		if err != nil || got != c.want || nt != c.ntCase || lfn != c.needLFN {
			t.Errorf("MakeShortName(%q, %v) = %q nt=%#x lfn=%v err=%v; want %q nt=%#x lfn=%v",
				c.long, c.mode, got[:], nt, lfn, err, c.want[:], c.ntCase, c.needLFN)
		}
		if !got.Valid() {
			t.Errorf("MakeShortName(%q) made %q, which Valid refuses", c.long, got[:])
		}
	}
}

func TestMakeShortNameRefusesBadNames(t *testing.T) {
	for _, bad := range []string{"", "...", "a/b", "a*b", "name "} {
		if _, _, _, err := MakeShortName(bad, ShortNameMixed, nil, noneExist); !errors.Is(err, ErrInvalidName) {
			t.Errorf("MakeShortName(%q): err = %v, want ErrInvalidName", bad, err)
		}
	}
	if _, _, _, err := MakeShortName(strings.Repeat("x", 256), ShortNameMixed, nil, noneExist); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("256 units: err = %v, want ErrNameTooLong", err)
	}
}

func TestMakeShortNameTakenPlainName(t *testing.T) {
	taken := func(s ShortName) bool { return s == sn("README  TXT") }
	if _, _, _, err := MakeShortName("README.TXT", ShortNameMixed, nil, taken); !errors.Is(err, ErrShortNameTaken) {
		t.Errorf("README.TXT over an existing README.TXT: err = %v, want ErrShortNameTaken", err)
	}
	// Any valid 8.3 form is checked first, whatever its case: "readme.txt" would be found as
	// README.TXT by a lookup, so Linux refuses it with -EEXIST too.
	if _, _, _, err := MakeShortName("readme.txt", ShortNameMixed, nil, taken); !errors.Is(err, ErrShortNameTaken) {
		t.Errorf("readme.txt over an existing README.TXT: err = %v, want ErrShortNameTaken", err)
	}
	// A name that is no 8.3 name just gets a tail.
	got, _, lfn, err := MakeShortName("read me.txt", ShortNameMixed, nil, taken)
	if err != nil || got != sn("README~1TXT") || !lfn {
		t.Errorf("read me.txt = %q lfn=%v err=%v", got[:], lfn, err)
	}
}

// firstTaken answers true for the first k candidates it is asked about, and records them all.
type firstTaken struct {
	k     int
	asked []ShortName
}

func (f *firstTaken) exists(s ShortName) bool {
	f.asked = append(f.asked, s)
	return len(f.asked) <= f.k
}

func isHex(b byte) bool { return '0' <= b && b <= '9' || 'A' <= b && b <= 'F' }

func TestMakeShortNameTails(t *testing.T) {
	const long = "verylongname.html"
	for k := 0; k <= 12; k++ {
		f := &firstTaken{k: k}
		got, _, lfn, err := MakeShortName(long, ShortNameMixed, nil, f.exists)
		if err != nil || !lfn {
			t.Fatalf("k=%d: %q lfn=%v err=%v", k, got[:], lfn, err)
		}
		if got != f.asked[len(f.asked)-1] || len(f.asked) != k+1 {
			t.Fatalf("k=%d: returned %q after %d questions", k, got[:], len(f.asked))
		}
		if k < 9 {
			if want := sn(fmt.Sprintf("VERYLO~%dHTM", k+1)); got != want {
				t.Errorf("k=%d: got %q, want %q", k, got[:], want[:])
			}
			continue
		}
		// Hashed form: 2 base bytes, 4 hex digits, '~', a digit 1..8, and the extension.
		if string(got[:2]) != "VE" || !isHex(got[2]) || !isHex(got[3]) || !isHex(got[4]) || !isHex(got[5]) ||
			got[6] != '~' || got[7] < '1' || got[7] > '8' || string(got[8:]) != "HTM" {
			t.Errorf("k=%d: got %q, want VExxxx~d.HTM", k, got[:])
		}
	}
	// The numeric tails asked first are exactly ~1..~9, the hashed ones step down by 11.
	f := &firstTaken{k: 11}
	MakeShortName(long, ShortNameMixed, nil, f.exists)
	var hexValues []int
	for _, c := range f.asked[9:] {
		var v int
		fmt.Sscanf(string(c[2:6]), "%04X", &v)
		hexValues = append(hexValues, v)
	}
	for i := 1; i < len(hexValues); i++ {
		if (hexValues[i-1]-hexValues[i]+0x10000)%0x10000 != 11 {
			t.Errorf("hashed values %04X then %04X: not 11 apart", hexValues[i-1], hexValues[i])
		}
	}
	// Deterministic: the same long name gives the same hashed candidates.
	g := &firstTaken{k: 11}
	MakeShortName(long, ShortNameMixed, nil, g.exists)
	for i := range f.asked {
		if f.asked[i] != g.asked[i] {
			t.Errorf("candidate %d differs between runs: %q, %q", i, f.asked[i][:], g.asked[i][:])
		}
	}
}

func TestMakeShortNameShortBaseTails(t *testing.T) {
	f := &firstTaken{k: 9}
	got, _, _, err := MakeShortName("x.jpeg", ShortNameMixed, nil, f.exists)
	if err != nil || got[0] != 'X' || !isHex(got[1]) || !isHex(got[4]) || got[5] != '~' || got[7] != ' ' ||
		string(got[8:]) != "JPE" {
		t.Errorf("x.jpeg after ~1..~9: %q, %v; want Xxxxx~d.JPE", got[:], err)
	}
}

func TestMakeShortNameGivesUp(t *testing.T) {
	calls := 0
	all := func(ShortName) bool { calls++; return true }
	_, _, _, err := MakeShortName("verylongname.html", ShortNameMixed, nil, all)
	if !errors.Is(err, ErrNoShortName) {
		t.Fatalf("err = %v, want ErrNoShortName", err)
	}
	if calls != numericTails+hashedTries {
		t.Errorf("exists was asked %d times, want %d", calls, numericTails+hashedTries)
	}
	// The hashed tries cover every 4-digit value once (11 and 65536 are coprime).
	seen := map[ShortName]bool{}
	MakeShortName("verylongname.html", ShortNameMixed, nil, func(s ShortName) bool { seen[s] = true; return true })
	if len(seen) != numericTails+hashedTries {
		t.Errorf("%d distinct candidates, want %d", len(seen), numericTails+hashedTries)
	}
}

func TestDisplayName(t *testing.T) {
	cases := []struct {
		s      ShortName
		ntCase byte
		mode   ShortNameMode
		want   string
	}{
		{sn("README  TXT"), 0, ShortNameMixed, "README.TXT"},
		{sn("README  TXT"), CaseLowerBase | CaseLowerExt, ShortNameMixed, "readme.txt"},
		{sn("README  TXT"), CaseLowerExt, ShortNameWinNT, "README.txt"},
		{sn("README  TXT"), CaseLowerBase, ShortNameMixed, "readme.TXT"},
		{sn("README  TXT"), CaseLowerBase | CaseLowerExt, ShortNameWin95, "README.TXT"}, // win95 ignores the bits
		{sn("README  TXT"), 0, ShortNameLower, "readme.txt"},
		{sn("NAME       "), 0, ShortNameMixed, "NAME"},
		{sn("MY FILE TXT"), 0, ShortNameMixed, "MY FILE.TXT"}, // inner space kept
		{sn("A       B  "), 0, ShortNameMixed, "A.B"},
		{sn("\x05BC     TXT"), 0, ShortNameMixed, "σBC.TXT"},      // 0x05 stands for 0xE5
		{sn("\x05BC     TXT"), 0, ShortNameLower, "σbc.txt"},      //
		{sn("GR\x9a\xe1E   TXT"), 0, ShortNameMixed, "GRÜßE.TXT"}, // code page 437
		{sn("GR\x9a\xe1E   TXT"), CaseLowerBase, ShortNameMixed, "grüße.TXT"},
		{sn("\xe4       TXT"), CaseLowerBase, ShortNameMixed, "σ.TXT"}, // Σ lowers to σ
		{sn("AB\x00DEFGHTXT"), 0, ShortNameMixed, "AB.TXT"},            // NUL ends the part
		{sn("           "), 0, ShortNameMixed, ""},
	}
	for _, c := range cases {
		if got := c.s.DisplayName(c.ntCase, c.mode, nil); got != c.want {
			t.Errorf("%q.DisplayName(%#x, %v, nil) = %q, want %q", c.s[:], c.ntCase, c.mode, got, c.want)
		}
	}
}

func TestParseShortName(t *testing.T) {
	cases := []struct {
		in   string
		want ShortName
		ok   bool
	}{
		{"longfi~1.txt", sn("LONGFI~1TXT"), true},
		{"LONGFI~1.TXT", sn("LONGFI~1TXT"), true},
		{"readme", sn("README     "), true},
		{"readme.txt.", sn("README  TXT"), true}, // trailing dots are stripped like any lookup
		{"a.b", sn("A       B  "), true},
		{"my file.txt", sn("MY FILE TXT"), true},
		{"σ.txt", sn("\x05       TXT"), true}, // a first 0xE5 is stored as 0x05
		{"ü.txt", sn("\x81       TXT"), true}, // non-ASCII taken as typed
		{"abcdefghi.txt", ShortName{}, false}, // base too long
		{"abc.html", ShortName{}, false},      // extension too long
		{"a.b.c", ShortName{}, false},         // two dots
		{".txt", ShortName{}, false},          // empty base
		{"", ShortName{}, false},              //
		{"ab .txt", ShortName{}, false},       // trailing space in the base
		{" ab.txt", ShortName{}, false},       // leading space
		{"a*b.txt", ShortName{}, false},       // fsck.fat's bad characters
		{"日.txt", ShortName{}, false},         // not in code page 437
		{"a\x01.txt", ShortName{}, false},     // control character
	}
	for _, c := range cases {
		got, ok := ParseShortName(c.in, nil)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ParseShortName(%q, nil) = %q, %v; want %q, %v", c.in, got[:], ok, c.want[:], c.ok)
		}
	}
}

func TestValid(t *testing.T) {
	valid := []ShortName{sn("README  TXT"), sn("\x05BC     TXT"), sn("MY FILE TXT"), sn("A_B~1   TXT"),
		sn("GR\x9a\xe1E   TXT"), sn("lower   txt"), sn("A+B     TXT")}
	for _, s := range valid {
		if !s.Valid() {
			t.Errorf("%q: Valid() = false", s[:])
		}
	}
	invalid := []ShortName{sn(" README TXT"), sn("\xe5BC     TXT"), sn("\x00          "), sn("A\x01B     TXT"),
		sn("A\x7fB     TXT"), sn("A*B     TXT"), sn("A?B     TXT"), sn("A.B     TXT"), sn("A:B     TXT"),
		sn(`A\B     TXT`), sn("A/B     TXT"), sn("A|B     TXT"), sn(`A"B     TXT`), sn("A<B     TXT"),
		sn("A>B     TXT"), sn("AB      T.T"), Dot, DotDot}
	for _, s := range invalid {
		if s.Valid() {
			t.Errorf("%q: Valid() = true", s[:])
		}
	}
}

// --- mtools as an independent judge -------------------------------------------------------

type mtoolsEntry struct {
	short  ShortName
	ntCase byte
	long   string // "" when the entry has no long name
}

// mtoolsCopy formats a small FAT12 image with mkfs.fat, copies a file under each name with
// mcopy (code page 437, Linux's default), and returns the root directory's entries in order.
func mtoolsCopy(t *testing.T, names ...string) []mtoolsEntry {
	t.Helper()
	testenv.RequireTool(t, "mkfs.fat", "mcopy")
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.fat", "-C", img, "720").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat: %v\n%s", err, out)
	}
	for _, n := range names {
		cmd := exec.Command("mcopy", "-i", img, src, "::"+n)
		cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1", "DEFAULT_CODEPAGE=437", "MTOOLSRC=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mcopy %q: %v\n%s", n, err, out)
		}
	}
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := ParseBootSector(raw[:512])
	if err != nil {
		t.Fatal(err)
	}
	g, err := bs.Geometry(int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	root := raw[g.RootDirSector*int64(g.SectorSize):][:g.RootEntries*DirEntrySize]
	var out []mtoolsEntry
	var units []uint16
	for off := 0; off < len(root); off += DirEntrySize {
		p := root[off : off+DirEntrySize]
		switch {
		case IsEnd(p):
			return out
		case IsDeleted(p):
			units = nil
		case IsLongName(p):
			l := DecodeLFN(p)
			units = append(append([]uint16(nil), l.LFNUnits()...), units...)
		default:
			e := DecodeDirEntry(p)
			if !e.IsVolumeLabel() {
				out = append(out, mtoolsEntry{short: e.Name, ntCase: e.NTCase & (CaseLowerBase | CaseLowerExt),
					long: string(utf16.Decode(units))})
			}
			units = nil
		}
	}
	return out
}

func TestShortNamesAgainstMtools(t *testing.T) {
	for _, c := range linuxShortNameCases {
		got, nt, lfn, err := MakeShortName(c.long, c.mode, nil, noneExist)
		if err != nil {
			t.Fatalf("MakeShortName(%q): %v", c.long, err)
		}
		entries := mtoolsCopy(t, c.long)
		if len(entries) != 1 {
			t.Fatalf("mcopy %q: %d entries", c.long, len(entries))
		}
		m := entries[0]
		same := m.short == got && m.ntCase == nt && (m.long != "") == lfn
		switch {
		case c.mtools && !same:
			t.Errorf("%q (%v): ours %q nt=%#x lfn=%v; mtools %q nt=%#x long=%q",
				c.long, c.mode, got[:], nt, lfn, m.short[:], m.ntCase, m.long)
		case !c.mtools && same:
			t.Errorf("%q (%v): documented as differing from mtools (%s), but mtools agrees", c.long, c.mode, c.why)
		case !c.mtools:
			t.Logf("%q (%v): ours %q lfn=%v, mtools %q nt=%#x long=%v: %s",
				c.long, c.mode, got[:], lfn, m.short[:], m.ntCase, m.long != "", c.why)
		}
	}
}

// Collisions: both walk ~1..~9; from the tenth, mtools uses ~10, ~11 while Linux (and we)
// switch to the hashed form.
func TestTailsAgainstMtools(t *testing.T) {
	var names []string
	for i := 1; i <= 11; i++ {
		names = append(names, fmt.Sprintf("verylongname%02d.html", i))
	}
	entries := mtoolsCopy(t, names...)
	if len(entries) != len(names) {
		t.Fatalf("%d entries for %d names", len(entries), len(names))
	}
	used := map[ShortName]bool{}
	for i, e := range entries {
		got, _, _, err := MakeShortName(names[i], ShortNameMixed, nil, func(s ShortName) bool { return used[s] })
		if err != nil {
			t.Fatal(err)
		}
		if i < 9 && got != e.short {
			t.Errorf("%s: ours %q, mtools %q", names[i], got[:], e.short[:])
		}
		if i >= 9 {
			if !bytes.HasPrefix(e.short[:], []byte("VERYL~1")) {
				t.Errorf("%s: mtools made %q, expected its ~1N form", names[i], e.short[:])
			}
			if string(got[:2]) != "VE" || got[6] != '~' {
				t.Errorf("%s: ours %q, want the hashed form", names[i], got[:])
			}
		}
		// Either way the name must not clash with what is already there.
		if used[got] {
			t.Errorf("%s: %q is already used", names[i], got[:])
		}
		used[e.short] = true
	}
}

// --- code pages ------------------------------------------------------------------------------

// glibc's iconv is an independent definition of each code page offered: every byte 0x01-0xFF,
// control codes and DEL included, decodes to what iconv says and encodes back.
func TestCodePagesAgainstIconv(t *testing.T) {
	testenv.RequireTool(t, "iconv")
	var in []byte
	for b := 1; b < 256; b++ {
		in = append(in, byte(b))
	}
	for _, n := range []int{437, 850, 852, 855, 860, 862, 863, 865, 866} {
		cp, err := LookupCodePage(n)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("iconv", "-f", fmt.Sprintf("CP%d", n), "-t", "UTF-8")
		cmd.Stdin = bytes.NewReader(in)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("iconv CP%d: %v", n, err)
		}
		runes := []rune(string(out))
		if len(runes) != len(in) {
			t.Fatalf("iconv gave %d characters for %d bytes of CP%d", len(runes), len(in), n)
		}
		for i, r := range runes {
			b := in[i]
			if got := cp.Decode(b); got != r {
				t.Errorf("CP%d Decode(%#02x) = %U, iconv says %U", n, b, got, r)
			}
			if got, ok := cp.Encode(r); !ok || got != b {
				t.Errorf("CP%d Encode(%U) = %#02x, %v; want %#02x", n, r, got, ok, b)
			}
		}
		if _, ok := cp.Encode(0); ok {
			t.Errorf("CP%d: NUL encodes", n)
		}
		if _, ok := cp.Encode('日'); ok {
			t.Errorf("CP%d: 日 encodes", n)
		}
	}
	var nilCP *CodePage
	if nilCP.Number() != 437 || nilCP.Decode(0x9D) != '¥' {
		t.Error("the nil code page is not 437")
	}
	for _, n := range []int{737, 932, 1252, 0} {
		if _, err := LookupCodePage(n); err == nil || !strings.Contains(err.Error(), "437, 850, 852") {
			t.Errorf("code page %d: %v, want a refusal listing what is offered", n, err)
		}
	}
}

// Code page 850 cases: letters with both cases in the page map to each other; dotless i does
// not become ASCII I.
func TestCP850Case(t *testing.T) {
	cp, _ := LookupCodePage(850)
	for b, want := range map[byte]byte{0x9B: 0x9D, 0x81: 0x9A, 0xA0: 0xB5, 0xD5: 0xD5, 'a': 'A'} {
		if got := cp.toUpper(b); got != want {
			t.Errorf("CP850 toUpper(%#02x) = %#02x, want %#02x", b, got, want)
		}
	}
	for b, want := range map[byte]byte{0x9D: 0x9B, 0xB5: 0xA0, 'A': 'a'} {
		if got := cp.toLower(b); got != want {
			t.Errorf("CP850 toLower(%#02x) = %#02x, want %#02x", b, got, want)
		}
	}
}

// Pairs read from Linux's fs/nls/nls_cp437.c charset2upper/charset2lower.
func TestCP437Case(t *testing.T) {
	upper := map[byte]byte{'a': 'A', 'z': 'Z', 'A': 'A', 0x81: 0x9A, 0x82: 0x90, 0x84: 0x8E, 0x86: 0x8F,
		0x87: 0x80, 0x91: 0x92, 0x94: 0x99, 0xA4: 0xA5, 0xE5: 0xE4, 0xED: 0xE8,
		0x83: 0x83, 0x98: 0x98, 0xE0: 0xE0, 0xE1: 0xE1, 0xE6: 0xE6, 0xEB: 0xEB, 0x9F: 0x9F}
	for b, want := range upper {
		if got := (*CodePage)(nil).toUpper(b); got != want {
			t.Errorf("cp437 toUpper(%#02x) = %#02x, want %#02x", b, got, want)
		}
	}
	lower := map[byte]byte{'A': 'a', 0x80: 0x87, 0x8E: 0x84, 0x8F: 0x86, 0x90: 0x82, 0x92: 0x91, 0x99: 0x94,
		0x9A: 0x81, 0xA5: 0xA4, 0xE4: 0xE5, 0xE8: 0xED, 0xE2: 0xE2, 0xE9: 0xE9, 0xEA: 0xEA}
	for b, want := range lower {
		if got := (*CodePage)(nil).toLower(b); got != want {
			t.Errorf("cp437 toLower(%#02x) = %#02x, want %#02x", b, got, want)
		}
	}
}
