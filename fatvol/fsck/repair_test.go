package fsck

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/internal/fuzzimage"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// repairImage runs Repair on an image file.
func repairImage(t *testing.T, img string) *RepairResult {
	t.Helper()
	dev, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	res, err := Repair(dev)
	if err != nil {
		t.Fatalf("Repair %s: %v", img, err)
	}
	return res
}

// runFsckFatRepair is `fsck.fat -a` on img; it fails the test unless fsck.fat exits 0 or 1.
func runFsckFatRepair(t *testing.T, img string) fsckFat {
	t.Helper()
	r := runFsckFatMode(t, "-a", img)
	if r.code > 1 {
		t.Fatalf("fsck.fat -a %s: exit %d\n%s", img, r.code, r.out)
	}
	return r
}

// recName is how fsck.fat -a names the files it saves lost chains in.
var recName = regexp.MustCompile(`^FSCK\d{4}\.REC$`)

// extractTree copies every file of the image out with mcopy and returns the files by path
// with their contents, and the bytes in the root's FSCKnnnn.REC files apart.
func extractTree(t *testing.T, img string) (map[string][]byte, int64) {
	t.Helper()
	dir := t.TempDir()
	run(t, "mcopy", "-s", "-n", "-i", img, "::", dir)
	files := map[string][]byte{}
	var rec int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if recName.MatchString(rel) {
			rec += int64(len(b))
			return nil
		}
		files[rel] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, rec
}

// fatEOC is an end-of-chain mark for any FAT width (setFAT keeps the entry's width).
const fatEOC = 0x0FFFFFFF

// clearCleanBit clears FAT[1]'s clean-shutdown bit (FAT16/32) in every copy.
func (v *vol) clearCleanBit(t *testing.T) {
	t.Helper()
	if v.g.Type == ondisk.FAT16 {
		v.setFAT(t, 1, uint32(binary.LittleEndian.Uint16(v.readAt(t, v.g.FATOffset(0)+2, 2)))&^0x8000)
		return
	}
	v.setFAT(t, 1, binary.LittleEndian.Uint32(v.readAt(t, v.g.FATOffset(0)+4, 4))&^0x08000000)
}

func (v *vol) setDirty(t *testing.T) {
	t.Helper()
	v.writeAt(t, int64(v.bs.StateOffset()), []byte{v.bs.State | ondisk.StateDirty})
}

// fsinfoOffset is where FSINFO's field at byte field lies.
func (v *vol) fsinfoOffset(field int64) int64 {
	return int64(v.bs.FSInfoSector)*int64(v.g.SectorSize) + field
}

// lostChain makes a lost chain of n clusters near the end of the volume.
func (v *vol) lostChain(t *testing.T, n uint32) {
	t.Helper()
	c := v.freeCluster()
	for i := uint32(0); i < n-1; i++ {
		v.setFAT(t, c+i, c+i+1)
	}
	v.setFAT(t, c+n-1, fatEOC)
}

// repairCase is a hand-made fault; repairable ones must be fixed by Repair as fsck.fat -a does,
// the others left untouched.
type repairCase struct {
	name   string
	types  string // the FAT types it applies to ("12 16 32")
	apply  func(t *testing.T, v *vol)
	unsafe bool // Repair must refuse it,
	kind   Kind // naming a problem of this kind
}

var repairCases = []repairCase{
	{name: "dirty bit", types: "12 16 32", apply: func(t *testing.T, v *vol) { v.setDirty(t) }},
	{name: "clean-shutdown bit clear", types: "16 32", apply: func(t *testing.T, v *vol) { v.clearCleanBit(t) }},
	{name: "lost cluster", types: "12 16 32", apply: func(t *testing.T, v *vol) { v.lostChain(t, 1) }},
	{name: "lost chain", types: "12 16 32", apply: func(t *testing.T, v *vol) { v.lostChain(t, 5) }},
	{name: "FAT copies differ", types: "12 16 32", apply: func(t *testing.T, v *vol) {
		v.setFAT(t, v.freeCluster(), fatEOC, 1)
	}},
	{name: "file size beyond chain", types: "12 16 32", apply: func(t *testing.T, v *vol) {
		v.setSize(t, v.entry(t, "A       TXT"), 0xFFFFFFFF)
	}},
	{name: "chain beyond file size", types: "12 16 32", apply: func(t *testing.T, v *vol) {
		v.setSize(t, v.entry(t, "B       TXT"), 10)
	}},
	{name: "empty file with a chain", types: "12 16 32", apply: func(t *testing.T, v *vol) {
		v.setSize(t, v.entry(t, "A       TXT"), 0)
	}},
	{name: "FSINFO free count wrong", types: "32", apply: func(t *testing.T, v *vol) {
		v.writeAt(t, v.fsinfoOffset(488), []byte{7, 0, 0, 0})
	}},
	{name: "FSINFO signature broken", types: "32", apply: func(t *testing.T, v *vol) {
		v.writeAt(t, v.fsinfoOffset(0), []byte("XXXX"))
	}},
	{name: "crash leftovers", types: "12 16 32", apply: func(t *testing.T, v *vol) {
		// What a writer killed mid-writeback leaves: the dirty bit, a chain allocated in the
		// first FAT only and never linked from an entry, a stale free count.
		v.setDirty(t)
		c := v.freeCluster()
		v.setFAT(t, c, c+1, 0)
		v.setFAT(t, c+1, fatEOC, 0)
		if v.g.Type == ondisk.FAT32 {
			v.writeAt(t, v.fsinfoOffset(488), []byte{9, 0, 0, 0})
		}
	}},
	{name: "cross-link", types: "12 16 32", unsafe: true, kind: CrossLink, apply: func(t *testing.T, v *vol) {
		v.setStart(t, v.entry(t, "B       TXT"), chainOf(t, v.img, "/A.TXT")[1])
	}},
	{name: "cross-link on a dirty volume", types: "16 32", unsafe: true, kind: CrossLink, apply: func(t *testing.T, v *vol) {
		v.setDirty(t)
		v.lostChain(t, 2)
		v.setStart(t, v.entry(t, "B       TXT"), chainOf(t, v.img, "/A.TXT")[1])
	}},
	{name: "cycle", types: "16 32", unsafe: true, kind: ChainCycle, apply: func(t *testing.T, v *vol) {
		a := chainOf(t, v.img, "/A.TXT")
		v.setFAT(t, a[2], a[0])
	}},
	{name: "chain into a free cluster", types: "16 32", unsafe: true, kind: BrokenChain, apply: func(t *testing.T, v *vol) {
		v.setFAT(t, chainOf(t, v.img, "/B.TXT")[1], 0)
	}},
	{name: "link out of range", types: "16 32", unsafe: true, kind: ClusterOutOfRange, apply: func(t *testing.T, v *vol) {
		v.setFAT(t, chainOf(t, v.img, "/B.TXT")[1], v.g.Clusters+50)
	}},
	{name: "bad short name", types: "16 32", unsafe: true, kind: BadEntry, apply: func(t *testing.T, v *vol) {
		v.writeAt(t, v.entry(t, "B       TXT")+1, []byte("?"))
	}},
	{name: "wrong dotdot", types: "16 32", unsafe: true, kind: DotEntries, apply: func(t *testing.T, v *vol) {
		v.setStart(t, v.g.ClusterOffset(chainOf(t, v.img, "/D1/D2")[0])+32, 5)
	}},
}

// TestRepairAgainstFsckFat makes each fault in a clean image made by mkfs.fat and mcopy and
// repairs one copy with Repair and another with fsck.fat -a. For a repairable fault both
// copies must then be clean to fsck.fat -n and hold the same files with the same contents;
// the only difference allowed is that fsck.fat -a saves lost chains as FSCKnnnn.REC files
// where Repair frees them, so the images are compared byte for byte when fsck.fat made no
// such file, and otherwise our used clusters must be fsck.fat's less those files'. A fault
// beyond Repair must leave the image byte-identical, with the problem named.
func TestRepairAgainstFsckFat(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy", "mshowfat")
	for _, fatType := range []string{"12", "16", "32"} {
		t.Run("FAT"+fatType, func(t *testing.T) {
			base := makeVol(t, fatType)
			for _, rc := range repairCases {
				if !strings.Contains(rc.types, fatType) {
					continue
				}
				t.Run(rc.name, func(t *testing.T) {
					v := *base
					v.img = copyImage(t, base.img)
					rc.apply(t, &v)
					if runFsckFat(t, v.img).clean() {
						t.Fatal("fsck.fat -n calls the damaged image clean")
					}
					damaged, err := os.ReadFile(v.img)
					if err != nil {
						t.Fatal(err)
					}
					theirs := copyImage(t, v.img)
					res := repairImage(t, v.img)
					repaired, err := os.ReadFile(v.img)
					if err != nil {
						t.Fatal(err)
					}
					if rc.unsafe {
						checkRefused(t, res, rc.kind, damaged, repaired)
						return
					}
					if len(res.Unrepairable) > 0 || !res.Changed() {
						t.Fatalf("not repaired: unrepairable %v\nbefore:\n%s", res.Unrepairable, listProblems(res.Before))
					}
					if !res.After.Clean() {
						t.Fatalf("our check after repair:\n%s", listProblems(res.After))
					}
					ours := runFsckFat(t, v.img)
					if !ours.clean() {
						t.Fatalf("fsck.fat -n after our repair:\n%s", ours.out)
					}
					ref := runFsckFatRepair(t, theirs)
					refCheck := runFsckFat(t, theirs)
					if !refCheck.clean() {
						t.Fatalf("fsck.fat -n after fsck.fat -a:\n%s", refCheck.out)
					}
					ourFiles, _ := extractTree(t, v.img)
					refFiles, recBytes := extractTree(t, theirs)
					compareTrees(t, ourFiles, refFiles)
					if recBytes == 0 {
						if i := firstDiff(repaired, mustRead(t, theirs)); i >= 0 {
							t.Errorf("images differ at byte %d (fsck.fat -a said:\n%s)", i, ref.out)
						}
						return
					}
					_, used, _, _ := ours.summary()
					_, refUsed, _, _ := refCheck.summary()
					if recClusters := int((recBytes + int64(v.g.ClusterSize) - 1) / int64(v.g.ClusterSize)); used != refUsed-recClusters {
						t.Errorf("used clusters: ours %d, fsck.fat -a's %d less %d in FSCKnnnn.REC files", used, refUsed, recClusters)
					}
				})
			}
		})
	}
}

// checkRefused requires Repair to have written nothing and named a problem of kind k.
func checkRefused(t *testing.T, res *RepairResult, k Kind, before, after []byte) {
	t.Helper()
	if i := firstDiff(before, after); i >= 0 {
		t.Fatalf("Repair changed byte %d of an image it should leave alone", i)
	}
	if res.Changed() || res.Clean() {
		t.Fatalf("Repair reports changed=%v clean=%v", res.Changed(), res.Clean())
	}
	for _, p := range res.Unrepairable {
		if p.Kind == k && p.Detail != "" {
			return
		}
	}
	t.Fatalf("no unrepairable %v problem; got %v\nall:\n%s", k, res.Unrepairable, listProblems(res.Before))
}

func compareTrees(t *testing.T, ours, ref map[string][]byte) {
	t.Helper()
	if len(ours) == 0 {
		t.Fatal("no files extracted from our repaired image")
	}
	for p, b := range ref {
		o, ok := ours[p]
		switch {
		case !ok:
			t.Errorf("%s: in fsck.fat's repaired image only", p)
		case !bytes.Equal(o, b):
			t.Errorf("%s: contents differ (%d bytes ours, %d fsck.fat's)", p, len(o), len(b))
		}
	}
	for p := range ours {
		if _, ok := ref[p]; !ok {
			t.Errorf("%s: in our repaired image only", p)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// firstDiff is the first offset where a and b differ, -1 if they are equal.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestRepairDosfstoolsImages runs Repair on broken images of the classes of dosfstools' test
// images: fuzzimage's planted ones, whose reference is a copy repaired by fsck.fat -a, and
// dosfstools' own with their repaired images when ../shared/dosfstools-tests is there. Where
// Repair takes the case on, the result must be byte-identical to the reference and clean to
// fsck.fat -n; elsewhere Repair must not write at all and must name the problem.
func TestRepairDosfstoolsImages(t *testing.T) {
	needTools(t, "fsck.fat")
	shared := testenv.SharedDir(filepath.Join("..", ".."))
	repaired := 0
	for _, im := range fuzzimage.AllImages(t, shared) {
		if !im.Broken || !strings.HasPrefix(im.Class, "check-") {
			continue
		}
		name := im.Name
		var refImg string
		if strings.HasSuffix(name, ".fsck") {
			refDump := filepath.Join(shared, im.Class+".xxd")
			if _, err := os.Stat(refDump); err != nil {
				continue // check-huge: no repaired reference (and too large to check)
			}
			refImg = xxdImage(t, refDump)
		} else {
			refImg = filepath.Join(t.TempDir(), name+".ref")
			run(t, "cp", im.Path, refImg)
			runFsckFatMode(t, "-a", refImg)
		}
		t.Run(name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), name+".img")
			run(t, "cp", im.Path, img)
			file, err := blockdev.Open(img, false)
			if err != nil {
				t.Fatal(err)
			}
			dev := blockdev.NewCounting(file)
			res, err := Repair(dev)
			dev.Close()
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Unrepairable) > 0 {
				if w := dev.Stats().Writes; w != 0 {
					t.Fatalf("Repair refused (%v) but wrote %d times", res.Unrepairable, w)
				}
				t.Logf("refused: %v", res.Unrepairable)
				return
			}
			if !res.Changed() || !res.After.Clean() {
				t.Fatalf("changed=%v, after:\n%s", res.Changed(), listProblems(res.After))
			}
			repaired++
			if ref := runFsckFat(t, img); !ref.clean() {
				t.Fatalf("fsck.fat -n after Repair:\n%s", ref.out)
			}
			if off := firstFileDiff(t, img, refImg); off >= 0 {
				t.Errorf("differs from the image fsck.fat repaired at byte %d", off)
			}
			t.Logf("repaired: %v", res.Repaired)
		})
	}
	if repaired == 0 {
		t.Fatal("Repair repaired none of the broken images")
	}
}

// firstFileDiff compares two files a MiB at a time: the first differing offset, -1 if equal.
func firstFileDiff(t *testing.T, a, b string) int64 {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); ; off += int64(len(ba)) {
		na, _ := fa.ReadAt(ba, off)
		nb, _ := fb.ReadAt(bb, off)
		if i := firstDiff(ba[:na], bb[:nb]); i >= 0 {
			return off + int64(i)
		}
		if na == 0 {
			return -1
		}
	}
}

// memRW is an in-memory device that also takes writes, keeping what they overwrote so that an
// iteration can be undone.
type memRW struct {
	*memDev
	undo []undoRec
}

type undoRec struct {
	off int64
	old []byte
}

func (m *memRW) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m.b)) {
		return 0, blockdev.ErrOutOfRange
	}
	m.undo = append(m.undo, undoRec{off, bytes.Clone(m.b[off : off+int64(len(p))])})
	return copy(m.b[off:], p), nil
}

func (m *memRW) Flush() error { return nil }

// set changes bytes as the damage does, undoably.
func (m *memRW) set(off int64, p []byte) { m.WriteAt(p, off) }

// rollback undoes every write, the last first.
func (m *memRW) rollback() {
	for i := len(m.undo) - 1; i >= 0; i-- {
		copy(m.b[m.undo[i].off:], m.undo[i].old)
	}
	m.undo = m.undo[:0]
}

// TestRepairRandomDamage damages a populated image at random where crashes and faulty writers
// do (FAT entries in one copy or all, file sizes, the dirty bit, FSINFO, now and then any
// metadata byte) and repairs it: Repair must never fail on a readable image, must write nothing
// when it names an unrepairable error, and whatever it repairs must check clean afterwards, to
// us and, on a sample, to fsck.fat -n.
func TestRepairRandomDamage(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy", "mshowfat")
	for _, fatType := range []string{"12", "16", "32"} {
		t.Run("FAT"+fatType, func(t *testing.T) {
			v := makeVol(t, fatType)
			orig := mustRead(t, v.img)
			entries := []int64{}
			for _, name := range []string{"A       TXT", "B       TXT", "C       TXT", "ALONGF~1TXT"} {
				entries = append(entries, entryOffset(t, orig, name))
			}
			metaEnd := v.g.FirstDataSector*int64(v.g.SectorSize) + 64*int64(v.g.ClusterSize)
			rng := rand.New(rand.NewSource(int64(len(fatType)) * 11))
			dev := &memRW{memDev: &memDev{b: bytes.Clone(orig)}}
			w := &vol{img: v.img, bs: v.bs, g: v.g}
			iterations := 200
			if testing.Short() {
				iterations = 40
			}
			repaired, refused, sampled := 0, 0, 0
			for i := 0; i < iterations; i++ {
				for n := 1 + rng.Intn(3); n > 0; n-- {
					damageAtRandom(rng, dev, w, entries, metaEnd)
				}
				damage := len(dev.undo) // writes beyond these are Repair's
				res, err := Repair(dev)
				switch {
				case err != nil:
					if len(dev.undo) > damage {
						t.Fatalf("iteration %d: Repair failed (%v) after writing", i, err)
					}
				case len(res.Unrepairable) > 0:
					refused++
					if len(dev.undo) > damage {
						t.Fatalf("iteration %d: Repair refused (%v) but wrote", i, res.Unrepairable)
					}
				case res.Changed():
					repaired++
					if !res.After.Clean() {
						t.Fatalf("iteration %d: not clean after repair:\nbefore:\n%safter:\n%s", i, listProblems(res.Before), listProblems(res.After))
					}
					if repaired%10 == 1 {
						sampled++
						path := filepath.Join(t.TempDir(), "r.img")
						if err := os.WriteFile(path, dev.b, 0o644); err != nil {
							t.Fatal(err)
						}
						if ref := runFsckFat(t, path); !ref.clean() {
							t.Fatalf("iteration %d: fsck.fat -n after our repair:\n%s\nwe repaired:\n%s", i, ref.out, listProblems(res.Before))
						}
					}
				}
				dev.rollback() // the repair's writes and the damage
			}
			t.Logf("%d iterations: %d repaired (%d judged by fsck.fat), %d refused", iterations, repaired, sampled, refused)
			if repaired < iterations/5 || refused == 0 {
				t.Fatalf("too few cases of each kind: %d repaired, %d refused of %d", repaired, refused, iterations)
			}
		})
	}
}

// damageAtRandom makes one random change of the kinds crashes and faulty writers make.
func damageAtRandom(rng *rand.Rand, dev *memRW, v *vol, entries []int64, metaEnd int64) {
	le := binary.LittleEndian
	switch k := rng.Intn(10); {
	case k < 4: // a FAT entry, in one copy or in all
		cl := uint32(2 + rng.Intn(120))
		if rng.Intn(3) == 0 {
			cl = v.g.Clusters + 1 - uint32(rng.Intn(20))
		}
		var val uint32
		switch rng.Intn(4) {
		case 0:
			val = 0
		case 1:
			val = fatEOC
		case 2:
			val = cl + 1
		default:
			val = 2 + uint32(rng.Intn(int(v.g.Clusters)))
		}
		copies := []int{rng.Intn(v.g.NumFATs)}
		if rng.Intn(2) == 0 {
			copies = []int{0, 1}
		}
		for _, c := range copies {
			setFATEntry(dev, v, c, cl, val)
		}
	case k < 6: // a file's size
		var b [4]byte
		le.PutUint32(b[:], uint32(rng.Intn(5*v.g.ClusterSize)))
		dev.set(entries[rng.Intn(len(entries))]+28, b[:])
	case k < 8: // the dirty bit
		dev.set(int64(v.bs.StateOffset()), []byte{v.bs.State | ondisk.StateDirty})
	case k < 9 && v.g.Type == ondisk.FAT32: // FSINFO's free count
		var b [4]byte
		le.PutUint32(b[:], rng.Uint32())
		dev.set(int64(v.bs.FSInfoSector)*int64(v.g.SectorSize)+488, b[:])
	default: // any metadata byte
		dev.set(rng.Int63n(metaEnd), []byte{byte(rng.Intn(256))})
	}
}

// setFATEntry sets entry cl of FAT copy i in memory, for any FAT width.
func setFATEntry(dev *memRW, v *vol, i int, cl, val uint32) {
	base := v.g.FATOffset(i)
	switch v.g.Type {
	case ondisk.FAT12:
		at := base + int64(cl)*3/2
		b := bytes.Clone(dev.b[at : at+2])
		if cl&1 == 0 {
			b[0], b[1] = byte(val), b[1]&0xF0|byte(val>>8)&0x0F
		} else {
			b[0], b[1] = b[0]&0x0F|byte(val<<4), byte(val>>4)
		}
		dev.set(at, b)
	case ondisk.FAT16:
		var b [2]byte
		binary.LittleEndian.PutUint16(b[:], uint16(val))
		dev.set(base+int64(cl)*2, b[:])
	default:
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], val&0x0FFFFFFF)
		dev.set(base+int64(cl)*4, b[:])
	}
}

// recordingDev is an in-memory device that logs every write and flush in order.
type recordingDev struct {
	*memDev
	ops []devOp
}

type devOp struct {
	flush bool
	off   int64
	data  []byte
}

func (r *recordingDev) WriteAt(p []byte, off int64) (int, error) {
	r.ops = append(r.ops, devOp{off: off, data: bytes.Clone(p)})
	return copy(r.b[off:], p), nil
}

func (o devOp) String() string {
	if o.flush {
		return "flush"
	}
	return fmt.Sprintf("write %d bytes at %d", len(o.data), o.off)
}

func (r *recordingDev) Flush() error {
	r.ops = append(r.ops, devOp{flush: true})
	return nil
}

// TestRepairCrashPoints records Repair's writes on a volume with crash leftovers, a size beyond
// its chain and FAT copies that differ, then replays every prefix of them onto the damaged
// image, as a crash at that point would leave it: until the last write the volume must still
// read as dirty, and a second Repair must take it from there to clean. The dirty bit is
// cleared only after a flush that follows every other write.
func TestRepairCrashPoints(t *testing.T) {
	needTools(t, "mkfs.fat", "mcopy", "mshowfat")
	for _, fatType := range []string{"16", "32"} {
		t.Run("FAT"+fatType, func(t *testing.T) {
			v := makeVol(t, fatType)
			v.setDirty(t)
			v.lostChain(t, 3)
			v.setFAT(t, v.freeCluster()-5, fatEOC, 1)
			v.setSize(t, v.entry(t, "B       TXT"), 10)
			damaged := mustRead(t, v.img)
			rec := &recordingDev{memDev: &memDev{b: bytes.Clone(damaged)}}
			res, err := Repair(rec)
			if err != nil || !res.Changed() || !res.After.Clean() {
				t.Fatalf("Repair: %v, %+v", err, res)
			}
			// The dirty bit is cleared (in the boot sector, then in FAT32's backup) only after
			// a flush that follows every other write, and a flush ends the repair.
			state := int64(v.bs.StateOffset())
			clear := -1
			for i, op := range rec.ops {
				if !op.flush && op.off == state && op.data[0]&ondisk.StateDirty == 0 {
					clear = i
					break
				}
			}
			if clear < 1 || !rec.ops[clear-1].flush || !rec.ops[len(rec.ops)-1].flush {
				t.Fatalf("the dirty bit is not cleared between flushes at the end: %v", rec.ops)
			}
			for _, op := range rec.ops[clear+1 : len(rec.ops)-1] {
				if op.flush || op.off%int64(v.g.SectorSize) != state {
					t.Fatalf("after the dirty bit is cleared: %v", op)
				}
			}
			// A crash after op k leaves ops[:k] on disk (a prefix), or, since a device may
			// reorder writes between flushes, everything up to the last flush before k plus op k
			// alone.
			lastFlush := 0
			for k := range rec.ops {
				var persisted []devOp
				if rec.ops[k].flush {
					lastFlush = k
				} else {
					persisted = append(append(persisted, rec.ops[:lastFlush]...), rec.ops[k])
				}
				for variant, ops := range [][]devOp{rec.ops[:k], persisted} {
					img := bytes.Clone(damaged)
					for _, op := range ops {
						if !op.flush {
							copy(img[op.off:], op.data)
						}
					}
					dev := &memRW{memDev: &memDev{b: img}}
					rep, err := Check(dev)
					if err != nil {
						t.Fatalf("crash after op %d: %v", k, err)
					}
					if (k < clear || k == clear && variant == 0) && !rep.Has(Dirty) {
						t.Errorf("crash after op %d of %d: the volume does not read as dirty", k, len(rec.ops))
					}
					again, err := Repair(dev)
					if err != nil || !again.Clean() {
						t.Fatalf("crash after op %d (%d ops on disk): second Repair: %v; unrepairable %v", k, len(ops), err, again.Unrepairable)
					}
				}
			}
			t.Logf("%d writes and flushes, each a crash point", len(rec.ops))
		})
	}
}

// xxdImage rebuilds an image from an xxd dump (sparse: xxd -r seeks over the gaps).
func xxdImage(t *testing.T, dump string) string {
	t.Helper()
	needTools(t, "xxd")
	img := filepath.Join(t.TempDir(), filepath.Base(dump)+".img")
	run(t, "xxd", "-r", dump, img)
	return img
}
