package fatvol_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// mdirWith lists the root of img with mtools set to a code page: "" leaves mtools its own
// default (850, with no configuration file), else DEFAULT_CODEPAGE names it.
func mdirWith(t *testing.T, img, codepage string) string {
	t.Helper()
	requireTools(t, "mdir")
	cmd := exec.Command("mdir", "-i", img, "::/")
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "TZ=UTC", "MTOOLS_SKIP_CHECK=1", "MTOOLSRC=/dev/null")
	if codepage != "" {
		cmd.Env = append(cmd.Env, "DEFAULT_CODEPAGE="+codepage)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mdir: %v\n%s", err, out)
	}
	return string(out)
}

// shortColumns are the short names mdir lists (its first 12 columns, base and extension),
// with their padding collapsed.
func shortColumns(listing string) []string {
	var names []string
	for _, line := range strings.Split(listing, "\n") {
		r := []rune(line)
		if len(r) < 13 || r[8] != ' ' || strings.HasPrefix(line, " ") {
			continue
		}
		names = append(names, strings.Join(strings.Fields(string(r[:12])), "."))
	}
	slices.Sort(names)
	return names
}

// TestCodePageWithMtools: short names go to and from mtools in the code page chosen. Byte 0x9D is
// Ø in code page 850 (mtools' default, and Windows' in Western Europe) and ¥ in 437: the engine
// with codepage 850 writes Ø as 0x9D, which mtools shows as Ø by default and as ¥ set to 437; names
// mcopy writes as short names alone (0x9D, and 0x9D with the NT lower-case bits) are read by the
// engine as ØL.TXT and øl2.txt in code page 850, and as ¥L.TXT and ¥l2.txt in 437.
func TestCodePageWithMtools(t *testing.T) {
	cp850, err := ondisk.LookupCodePage(850)
	if err != nil {
		t.Fatal(err)
	}
	img := makeImage(t, fat16)
	v := openVolumeWith(t, img, fatvol.Options{CodePage: cp850})
	writeVolumeFile(t, v, "ØL.TXT", []byte("written by the engine\n"))
	writeVolumeFile(t, v, "Ærø.txt", []byte("written by the engine\n"))
	closeVolume(t, v)
	checkClean(t, img)
	if got, want := shortColumns(mdirWith(t, img, "")), []string{"ÆRØ.TXT", "ØL.TXT"}; !slices.Equal(got, want) {
		t.Errorf("mdir (mtools' default code page 850) lists short names %q, want %q", got, want)
	}
	if got, want := shortColumns(mdirWith(t, img, "437")), []string{"¥L.TXT", "ÆR¥.TXT"}; !slices.Equal(got, want) {
		t.Errorf("mdir set to code page 437 lists short names %q, want %q", got, want)
	}

	// mcopy, in its default code page 850, writes short names alone.
	img = makeImage(t, fat16)
	src := filepath.Join(t.TempDir(), "src")
	os.WriteFile(src, []byte("written by mcopy\n"), 0o644)
	mtools(t, img, "mcopy", src, "::/ØL.TXT")
	mtools(t, img, "mcopy", src, "::/øl2.txt")
	for _, c := range []struct {
		cp   *ondisk.CodePage
		want []string
	}{{cp850, []string{"ØL.TXT", "øl2.txt"}}, {nil, []string{"¥L.TXT", "¥l2.txt"}}} {
		v := openVolumeWith(t, img, fatvol.Options{CodePage: c.cp, ReadOnly: true})
		ents, err := v.ReadDir(".")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		slices.Sort(names)
		if !slices.Equal(names, c.want) {
			t.Errorf("code page %d: the engine lists %q, want %q", c.cp.Number(), names, c.want)
		}
		if got := string(readVolumeFile(t, v, c.want[0])); got != "written by mcopy\n" {
			t.Errorf("code page %d: %s reads %q", c.cp.Number(), c.want[0], got)
		}
		closeVolume(t, v)
	}
}
