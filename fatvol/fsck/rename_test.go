package fsck

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

func openRW(t *testing.T, img string) *blockdev.File {
	t.Helper()
	dev, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// renameVol is an image made by mkfs.fat and mcopy for the interrupted-rename cases, with the
// files the cases give a second name.
func renameVol(t *testing.T, fatType string) (img string, tree map[string][]byte) {
	t.Helper()
	v := makeVol(t, fatType)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "NEW", "MSG.TXT"), 3000)
	writeFile(t, filepath.Join(dir, "A", "D", "F.TXT"), 700)
	writeFile(t, filepath.Join(dir, "EMPTY.TXT"), 0)
	if err := os.MkdirAll(filepath.Join(dir, "CUR"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "B"), 0o755); err != nil {
		t.Fatal(err)
	}
	mcopyTree(t, v.img, dir)
	tree, _ = extractTree(t, v.img)
	return v.img, tree
}

// recordOf finds the checker's record of the file at path.
func recordOf(t *testing.T, c *checker, path string) *fileRec {
	t.Helper()
	for i := int32(0); i < c.recs.len(); i++ {
		if c.path(i) == path {
			return c.recs.at(i)
		}
	}
	t.Fatalf("%s not found", path)
	return nil
}

// secondName puts a copy of the short entry of from (marked as a rename's new name when mark)
// into the first free slot of directory dir ("/" for the root), as a crash between the two
// writes of a rename leaves it, and returns the new entry's offset.
func secondName(t *testing.T, img, from, dir string, mark bool) int64 {
	t.Helper()
	dev := openRW(t, img)
	c, err := check(dev, Options{})
	dev.Close()
	if err != nil {
		t.Fatal(err)
	}
	src := recordOf(t, c, from)
	var start int64
	if dir == "/" {
		start = c.dirExtents(0)[0].off
	} else {
		start = c.g.ClusterOffset(recordOf(t, c, dir).start)
	}
	var off int64
	patchImage(t, img, func(b []byte) {
		off = start
		for b[off] != 0 {
			off += ondisk.DirEntrySize
		}
		copy(b[off:off+ondisk.DirEntrySize], b[src.entryOff:src.entryOff+ondisk.DirEntrySize])
		if mark {
			b[off+12] |= ondisk.RenameNew
		}
	})
	return off
}

// TestInterruptedRename: two entries of one file, the new one marked, are what a crash in the
// middle of the engine's rename leaves. Check reports them as one interrupted rename (not a
// cross-link), fsck.fat -n (which knows nothing of the mark) as files sharing clusters; Repair
// keeps the marked name, removes the old entry with its long name and clears the mark, after
// which fsck.fat -n finds nothing and mtools reads the file under its new name with its bytes.
func TestInterruptedRename(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy", "mdir")
	cases := []struct {
		name, from, dir, to string // to: the new name's path after the repair
		newName             string // the new entry's name, when not from's: a copied short entry has no long name
		dotDot              bool   // a directory: its '..' already names the new parent
	}{
		{name: "file to another directory", from: "/NEW/MSG.TXT", dir: "/CUR", to: "CUR/MSG.TXT"},
		{name: "long name to another directory", from: "/A long file name.txt", dir: "/NEW", to: "NEW/ALONGF~1.TXT", newName: "ALONGF~1.TXT"},
		{name: "empty file", from: "/EMPTY.TXT", dir: "/CUR", to: "CUR/EMPTY.TXT"},
		{name: "directory to another parent", from: "/A/D", dir: "/B", to: "B/D/F.TXT"},
		{name: "directory whose '..' names the new parent", from: "/A/D", dir: "/B", to: "B/D/F.TXT", dotDot: true},
	}
	for _, fatType := range []string{"12", "16", "32"} {
		t.Run("FAT"+fatType, func(t *testing.T) {
			base, tree := renameVol(t, fatType)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					img := copyImage(t, base)
					newOff := secondName(t, img, tc.from, tc.dir, true)
					if tc.dotDot {
						pointDotDot(t, img, tc.from, tc.dir)
					}
					rep, err := checkImage(t, img)
					if err != nil {
						t.Fatal(err)
					}
					newName := tc.newName
					if newName == "" {
						newName = filepath.Base(tc.from)
					}
					p := findProblem(t, rep, InterruptedRename)
					if p.Path != tc.dir+"/"+newName || p.EntryOffset != newOff {
						t.Errorf("the rename is reported at %s (entry %d), want the new name in %s (entry %d)", p.Path, p.EntryOffset, tc.dir, newOff)
					}
					for _, q := range rep.Errors() {
						if q.Kind != InterruptedRename {
							t.Errorf("besides the rename: %v %s", q.Kind, q)
						}
					}
					// fsck.fat sees two files on one chain (for the empty file: two entries, which
					// it does not mind).
					if ref := runFsckFat(t, img); tc.from != "/EMPTY.TXT" && (ref.clean() || !strings.Contains(ref.out, "share clusters")) {
						t.Errorf("fsck.fat -n on the two names:\n%s", ref.out)
					}
					res := repairImage(t, img)
					if len(res.Unrepairable) > 0 || !res.Clean() {
						t.Fatalf("repair: unrepairable %v, after:\n%s", res.Unrepairable, listProblems(res.After))
					}
					if ref := runFsckFat(t, img); !ref.clean() {
						t.Fatalf("fsck.fat -n after the repair:\n%s", ref.out)
					}
					got, _ := extractTree(t, img)
					want := map[string][]byte{}
					oldPrefix := strings.TrimPrefix(tc.from, "/")
					newPrefix := strings.TrimPrefix(tc.dir, "/") + "/" + newName
					for name, b := range tree {
						if name == oldPrefix || strings.HasPrefix(name, oldPrefix+"/") {
							name = newPrefix + strings.TrimPrefix(name, oldPrefix)
						}
						want[name] = b
					}
					if _, ok := got[tc.to]; !ok {
						t.Errorf("%s missing after the repair", tc.to)
					}
					compareTrees(t, got, want)
					if b := mustRead(t, img); b[newOff+12]&ondisk.RenameNew != 0 {
						t.Error("the mark is still set")
					}
				})
			}
		})
	}
}

// pointDotDot points the '..' of directory from at directory dir.
func pointDotDot(t *testing.T, img, from, dir string) {
	t.Helper()
	dev := openRW(t, img)
	c, err := check(dev, Options{})
	dev.Close()
	if err != nil {
		t.Fatal(err)
	}
	d, p := recordOf(t, c, from), recordOf(t, c, dir)
	patchImage(t, img, func(b []byte) {
		off := c.g.ClusterOffset(d.start) + ondisk.DirEntrySize
		binary.LittleEndian.PutUint16(b[off+26:], uint16(p.start))
		binary.LittleEndian.PutUint16(b[off+20:], uint16(p.start>>16))
	})
}

// TestRenameMarkAlone: a mark left on an entry with no other name (a crash after the old
// entry's removal, before the mark was cleared) is nothing to Check, fsck.fat, or mtools.
func TestRenameMarkAlone(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy", "mdir")
	for _, fatType := range []string{"12", "16", "32"} {
		t.Run("FAT"+fatType, func(t *testing.T) {
			img, tree := renameVol(t, fatType)
			for _, name := range []string{"MSG     TXT", "D          "} {
				patchImage(t, img, func(b []byte) { b[entryOffset(t, b, name)+12] |= ondisk.RenameNew })
			}
			rep, err := checkImage(t, img)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Clean() || len(rep.Problems) > 0 {
				t.Errorf("check:\n%s", listProblems(rep))
			}
			if ref := runFsckFat(t, img); !ref.clean() || strings.Count(ref.out, "\n") > 3 {
				t.Errorf("fsck.fat -n:\n%s", ref.out)
			}
			out := run(t, "mdir", "-i", img, "::/NEW")
			if !strings.Contains(out, "MSG") || !strings.Contains(out, "TXT") {
				t.Errorf("mdir ::/NEW does not list MSG.TXT:\n%s", out)
			}
			got, _ := extractTree(t, img)
			compareTrees(t, got, tree)
		})
	}
}

// TestNotARename: two names of one chain that do not look like a rename (both marked, neither,
// or sizes that differ) stay the cross-link they are, which Repair does not touch.
func TestNotARename(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy", "mdir")
	base, _ := renameVol(t, "16")
	for _, tc := range []struct {
		name  string
		patch func(b []byte, old, new int64)
	}{
		{"neither marked", func(b []byte, old, new int64) { b[new+12] &^= ondisk.RenameNew }},
		{"both marked", func(b []byte, old, new int64) { b[old+12] |= ondisk.RenameNew }},
		{"sizes differ", func(b []byte, old, new int64) { binary.LittleEndian.PutUint32(b[new+28:], 2999) }},
		{"attributes differ", func(b []byte, old, new int64) { b[new+11] |= ondisk.AttrHidden }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := copyImage(t, base)
			newOff := secondName(t, img, "/NEW/MSG.TXT", "/CUR", true)
			patchImage(t, img, func(b []byte) {
				var offs []int64
				for off := int64(0); off+32 <= int64(len(b)); off += 32 {
					if string(b[off:off+11]) == "MSG     TXT" && off != newOff {
						offs = append(offs, off)
					}
				}
				if len(offs) != 1 {
					t.Fatalf("old entry found %d times", len(offs))
				}
				tc.patch(b, offs[0], newOff)
			})
			rep, err := checkImage(t, img)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Has(InterruptedRename) || !rep.Has(CrossLink) {
				t.Errorf("check:\n%s", listProblems(rep))
			}
			before := mustRead(t, img)
			res := repairImage(t, img)
			checkRefused(t, res, CrossLink, before, mustRead(t, img))
		})
	}
}

// TestOrphanLFNRepair: long-name entries whose short entry is gone (what a cut leaves of a name
// crossing sectors) are reported as fsck.fat -n reports them, and Repair deletes them as fsck.fat
// -a does: both leave a volume fsck.fat -n calls clean, with the same files (the entry's chain is
// lost: fsck.fat -a saves it as a FSCKnnnn.REC file, which the comparison leaves out).
func TestOrphanLFNRepair(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy", "mdir")
	for _, fatType := range []string{"12", "16", "32"} {
		t.Run("FAT"+fatType, func(t *testing.T) {
			img, tree := renameVol(t, fatType)
			patchImage(t, img, func(b []byte) { b[entryOffset(t, b, "ALONGF~1TXT")] = 0xE5 })
			delete(tree, "A long file name.txt")
			rep, err := checkImage(t, img)
			if err != nil {
				t.Fatal(err)
			}
			findProblem(t, rep, OrphanLFN)
			if ref := runFsckFat(t, img); ref.clean() || !strings.Contains(ref.out, "Orphaned long file name part") {
				t.Errorf("fsck.fat -n on the orphan:\n%s", ref.out)
			}
			theirs := copyImage(t, img)
			res := repairImage(t, img)
			if len(res.Unrepairable) > 0 || !res.Clean() {
				t.Fatalf("repair: unrepairable %v, after:\n%s", res.Unrepairable, listProblems(res.After))
			}
			runFsckFatRepair(t, theirs)
			for _, im := range []string{img, theirs} {
				if ref := runFsckFat(t, im); !ref.clean() {
					t.Errorf("fsck.fat -n after the repair:\n%s", ref.out)
				}
				got, _ := extractTree(t, im)
				compareTrees(t, got, tree)
			}
		})
	}
}
