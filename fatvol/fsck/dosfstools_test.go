package fsck

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/internal/fuzzimage"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// brokenImageKinds is the kind each broken dosfstools image must be reported with, and the
// words fsck.fat prints for the same problem.
var brokenImageKinds = map[string]struct {
	kind     Kind
	words    string
	severity Severity // Error unless fsck.fat only mentions the problem
}{
	"check-bad_names":                        {BadEntry, "Bad short file name", Error},
	"check-chain_to_free_cluster":            {BrokenChain, "Contains a free cluster", Error},
	"check-chain_to_other_file":              {CrossLink, "share clusters", Error},
	"check-chain_too_long":                   {ChainLength, "cluster chain length is >", Error},
	"check-circular_chain":                   {ChainCycle, "Circular cluster chain", Error},
	"check-dot_entries":                      {DotEntries, "entry in this slot", Error},
	"check-duplicate_names":                  {DuplicateName, "Duplicate directory entry", Error},
	"check-encryption_with_duplicate_dirent": {DuplicateName, "Duplicate directory entry", Error},
	"check-encryption_with_invalid_83":       {Label, "volume label", Error},
	"check-fat12_first_cluster":              {FATHeader, "FATs appear to be corrupt", Error},
	"check-fat16_first_cluster":              {FATHeader, "FATs appear to be corrupt", Error},
	"check-fat32_first_cluster":              {FATHeader, "FATs appear to be corrupt", Error},
	"check-fat16_dos_cln_shut":               {Dirty, "Dirty bit is set", Error},
	"check-fat32_dos_cln_shut":               {Dirty, "Dirty bit is set", Error},
	"check-label-different":                  {Label, "and different", Error},
	"check-label-only-boot":                  {Label, "no volume label in root directory", Error},
	"check-label-only-root":                  {Label, "no label in boot sector", Error},
	// The classes fuzzimage plants besides dosfstools' images; it checks their words itself.
	"check-first_cluster": {FATHeader, "", Error},
	"check-dos_cln_shut":  {Dirty, "", Error},
	"lost_clusters":       {LostClusters, "", Error},
	"lfn_checksum":        {LFNChecksum, "", Warning},
	"fsinfo_free_count":   {FSInfo, "", Error},
}

// TestDosfstoolsImages checks every dosfstools test image and requires our verdict to be
// fsck.fat -n's. Broken images must also carry the problem kind fsck.fat reports, with the path
// fsck.fat prints; for images fsck.fat calls clean the file and cluster counts must match.
func TestDosfstoolsImages(t *testing.T) {
	needTools(t, "fsck.fat")
	seenBroken := 0
	for _, im := range fuzzimage.AllImages(t, testenv.SharedDir(filepath.Join("..", ".."))) {
		t.Run(im.Name, func(t *testing.T) {
			img := im.Path
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
			want, ok := brokenImageKinds[im.Class]
			if !ok {
				return // clean, or check-huge: covered by the could-not-check path above
			}
			seenBroken++
			if !strings.Contains(ref.out, want.words) { // "" for the planted classes beyond dosfstools'
				t.Fatalf("fsck.fat -n does not report %q:\n%s", want.words, ref.out)
			}
			p := findProblem(t, rep, want.kind)
			if p.Severity != want.severity {
				t.Errorf("%v problem is a %v", want.kind, p.Severity)
			}
			// fsck.fat prints short names, upper case: the case of mtools' names is not its.
			out, path := strings.ToUpper(ref.out), strings.ToUpper(p.Path)
			if p.Path != "" && p.Path != "/" && !strings.Contains(out, path+"\n") && !strings.Contains(out, path+"  AND\n") {
				t.Errorf("our path %q for %v is not a path fsck.fat prints:\n%s", p.Path, want.kind, ref.out)
			}
		})
	}
	if seenBroken == 0 {
		t.Fatal("no broken image was checked")
	}
}
