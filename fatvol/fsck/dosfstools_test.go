package fsck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dosfstoolsDir is where the dosfstools test dumps live: shared/ beside the repository.
func dosfstoolsDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "dosfstools-tests"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("dosfstools test images not found at %s: %v", dir, err)
	}
	return dir
}

// xxdImage rebuilds an image from an xxd dump (sparse: xxd -r seeks over the gaps).
func xxdImage(t *testing.T, dump string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), filepath.Base(dump)+".img")
	run(t, "xxd", "-r", dump, img)
	return img
}

// brokenImageKinds is the kind each broken dosfstools image must be reported with, and the
// words fsck.fat prints for the same problem.
var brokenImageKinds = map[string]struct {
	kind  Kind
	words string
}{
	"check-bad_names":                        {BadEntry, "Bad short file name"},
	"check-chain_to_free_cluster":            {BrokenChain, "Contains a free cluster"},
	"check-chain_to_other_file":              {CrossLink, "share clusters"},
	"check-chain_too_long":                   {ChainLength, "cluster chain length is >"},
	"check-circular_chain":                   {ChainCycle, "Circular cluster chain"},
	"check-dot_entries":                      {DotEntries, "entry in this slot"},
	"check-duplicate_names":                  {DuplicateName, "Duplicate directory entry"},
	"check-encryption_with_duplicate_dirent": {DuplicateName, "Duplicate directory entry"},
	"check-encryption_with_invalid_83":       {Label, "volume label"},
	"check-fat12_first_cluster":              {FATHeader, "FATs appear to be corrupt"},
	"check-fat16_first_cluster":              {FATHeader, "FATs appear to be corrupt"},
	"check-fat32_first_cluster":              {FATHeader, "FATs appear to be corrupt"},
	"check-fat16_dos_cln_shut":               {Dirty, "Dirty bit is set"},
	"check-fat32_dos_cln_shut":               {Dirty, "Dirty bit is set"},
	"check-label-different":                  {Label, "and different"},
	"check-label-only-boot":                  {Label, "no volume label in root directory"},
	"check-label-only-root":                  {Label, "no label in boot sector"},
}

// TestDosfstoolsImages checks every dosfstools test image and requires our verdict to be
// fsck.fat -n's. Broken images must also carry the problem kind fsck.fat reports, with the path
// fsck.fat prints; for images fsck.fat calls clean the file and cluster counts must match.
func TestDosfstoolsImages(t *testing.T) {
	needTools(t, "fsck.fat", "xxd")
	dir := dosfstoolsDir(t)
	dumps, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	seenBroken := 0
	for _, dump := range dumps {
		base := filepath.Base(dump)
		ext := filepath.Ext(base)
		if ext != ".xxd" && ext != ".fsck" {
			continue
		}
		t.Run(base, func(t *testing.T) {
			img := xxdImage(t, dump)
			ref := runFsckFat(t, img)
			rep, err := checkImage(t, img)
			if err != nil {
				if ref.clean() {
					t.Fatalf("Check could not check (%v) but fsck.fat -n calls it clean", err)
				}
				t.Logf("could not check: %v; fsck.fat exit %d", err, ref.code)
				return
			}
			if rep.Clean() != ref.clean() {
				t.Fatalf("verdict: ours clean=%v, fsck.fat -n exit %d\nours:\n%sfsck.fat:\n%s", rep.Clean(), ref.code, listProblems(rep), ref.out)
			}
			if ref.clean() {
				sameSummary(t, rep, ref)
			}
			if ext != ".fsck" {
				return
			}
			want, ok := brokenImageKinds[strings.TrimSuffix(base, ext)]
			if !ok {
				return // check-huge: covered by the could-not-check path above
			}
			seenBroken++
			if !strings.Contains(ref.out, want.words) {
				t.Fatalf("fsck.fat -n does not report %q:\n%s", want.words, ref.out)
			}
			p := findProblem(t, rep, want.kind)
			if p.Severity != Error {
				t.Errorf("%v problem is a %v", want.kind, p.Severity)
			}
			if p.Path != "" && !strings.Contains(ref.out, p.Path+"\n") && !strings.Contains(ref.out, p.Path+"  and\n") {
				t.Errorf("our path %q for %v is not a path fsck.fat prints:\n%s", p.Path, want.kind, ref.out)
			}
		})
	}
	if seenBroken == 0 {
		t.Fatal("no broken image was checked")
	}
}
