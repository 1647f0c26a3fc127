package fsck

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// vol is a clean image made by mkfs.fat and mcopy, with what the corruption tests need to know
// about it: geometry, entry offsets (found by their bytes) and chains (from mshowfat).
type vol struct {
	img string
	bs  *ondisk.BootSector
	g   ondisk.Geometry
}

func (v *vol) open(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(v.img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (v *vol) writeAt(t *testing.T, off int64, p []byte) {
	t.Helper()
	f := v.open(t)
	defer f.Close()
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
}

func (v *vol) readAt(t *testing.T, off int64, n int) []byte {
	t.Helper()
	f := v.open(t)
	defer f.Close()
	p := make([]byte, n)
	if _, err := f.ReadAt(p, off); err != nil {
		t.Fatal(err)
	}
	return p
}

// setFAT sets a FAT entry in the given copies (all when none are given).
func (v *vol) setFAT(t *testing.T, cluster, value uint32, copies ...int) {
	t.Helper()
	if len(copies) == 0 {
		for i := 0; i < v.g.NumFATs; i++ {
			copies = append(copies, i)
		}
	}
	for _, i := range copies {
		off := v.g.FATOffset(i)
		if v.g.Type == ondisk.FAT12 {
			at := off + int64(cluster)*3/2
			b := v.readAt(t, at, 2)
			if cluster&1 == 0 {
				b[0], b[1] = byte(value), b[1]&0xF0|byte(value>>8)&0x0F
			} else {
				b[0], b[1] = b[0]&0x0F|byte(value<<4), byte(value>>4)
			}
			v.writeAt(t, at, b)
		} else if v.g.Type == ondisk.FAT16 {
			var b [2]byte
			binary.LittleEndian.PutUint16(b[:], uint16(value))
			v.writeAt(t, off+int64(cluster)*2, b[:])
		} else {
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], value)
			v.writeAt(t, off+int64(cluster)*4, b[:])
		}
	}
}

// entry finds a short directory entry by its 11-byte name in the first 16 MiB of the image.
func (v *vol) entry(t *testing.T, name string) int64 {
	t.Helper()
	st, err := os.Stat(v.img)
	if err != nil {
		t.Fatal(err)
	}
	return entryOffset(t, v.readAt(t, 0, int(min(st.Size(), 16<<20))), name)
}

func (v *vol) setStart(t *testing.T, entryOff int64, cluster uint32) {
	t.Helper()
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], uint16(cluster>>16))
	v.writeAt(t, entryOff+20, b[:])
	binary.LittleEndian.PutUint16(b[:], uint16(cluster))
	v.writeAt(t, entryOff+26, b[:])
}

func (v *vol) setSize(t *testing.T, entryOff int64, size uint32) {
	t.Helper()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], size)
	v.writeAt(t, entryOff+28, b[:])
}

// freeCluster is a cluster near the end of the volume, far from anything mcopy allocated.
func (v *vol) freeCluster() uint32 { return v.g.Clusters - 10 }

// makeVol builds the base image for one FAT type ("12", "16" or "32"): files of a few clusters, a long name and a
// directory chain /D1/D2/D3/D4 with a file at the bottom.
func makeVol(t *testing.T, fatType string) *vol {
	t.Helper()
	var img string
	switch fatType {
	case "12":
		img = mkfsImage(t, 4<<20, "-F", "12", "-s", "4")
	case "16":
		img = mkfsImage(t, 32<<20, "-F", "16", "-s", "4")
	default:
		img = mkfsImage(t, 40<<20, "-F", "32", "-s", "1")
	}
	cs := 2048
	if fatType == "32" {
		cs = 512
	}
	tree := t.TempDir()
	writeFile(t, filepath.Join(tree, "A.TXT"), 3*cs-100)
	writeFile(t, filepath.Join(tree, "B.TXT"), 3*cs)
	writeFile(t, filepath.Join(tree, "A long file name.txt"), 10)
	writeFile(t, filepath.Join(tree, "D1", "D2", "D3", "D4", "C.TXT"), 2*cs)
	mcopyTree(t, img, tree)
	b := make([]byte, 512)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	bs, err := ondisk.ParseBootSector(b)
	if err != nil {
		t.Fatal(err)
	}
	g, err := bs.Geometry(0)
	if err != nil {
		t.Fatal(err)
	}
	if ref := runFsckFat(t, img); !ref.clean() {
		t.Fatalf("base image unclean:\n%s", ref.out)
	}
	return &vol{img: img, bs: bs, g: g}
}

// corruption is one hand-made fault and what it must be reported as.
type corruption struct {
	name    string
	fat32   bool // only on FAT32
	apply   func(t *testing.T, v *vol) (path string, cluster uint32, entryOff int64)
	kind    Kind
	sev     Severity
	fsckSay string // what fsck.fat -n prints for it
}

var corruptions = []corruption{
	{
		name: "cross-link", kind: CrossLink, sev: Error, fsckSay: "share clusters",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			a := chainOf(t, v.img, "/A.TXT")
			off := v.entry(t, "B       TXT")
			v.setStart(t, off, a[1])
			return "/B.TXT", a[1], off
		},
	},
	{
		name: "LFN checksum", kind: LFNChecksum, sev: Warning, fsckSay: "Wrong checksum for long file name",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			off := v.entry(t, "ALONGF~1TXT")
			first := off
			for p := off - 32; ; p -= 32 {
				e := v.readAt(t, p, 32)
				if e[11] != ondisk.AttrLongName {
					break
				}
				v.writeAt(t, p+13, []byte{e[13] + 1})
				first = p
			}
			if first == off {
				t.Fatal("no long-name entries before ALONGF~1.TXT")
			}
			return "/ALONGF~1.TXT", 0, first
		},
	},
	{
		name: "LFN part checksum", kind: LFNChecksum, sev: Warning, fsckSay: "Checksum in long filename part wrong",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			off := v.entry(t, "ALONGF~1TXT") - 32 // the last long-name entry on disk
			e := v.readAt(t, off, 32)
			if e[11] != ondisk.AttrLongName || e[0]&0x40 != 0 {
				t.Fatalf("entry before the short one is not a middle long-name entry: % x", e[:12])
			}
			v.writeAt(t, off+13, []byte{e[13] ^ 0x55})
			return "/", 0, off
		},
	},
	{
		name: "cycle", kind: ChainCycle, sev: Error, fsckSay: "Circular cluster chain",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			a := chainOf(t, v.img, "/A.TXT")
			v.setFAT(t, a[2], a[0])
			return "/A.TXT", a[2], v.entry(t, "A       TXT")
		},
	},
	{
		name: "FAT copies differ", kind: FATMismatch, sev: Error, fsckSay: "FATs differ",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			c := v.freeCluster()
			v.setFAT(t, c, 0x0FFFFFFF, 1)
			return "", c, -1
		},
	},
	{
		name: "lost cluster", kind: LostClusters, sev: Error, fsckSay: "Reclaimed 1 unused cluster",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			c := v.freeCluster()
			v.setFAT(t, c, 0x0FFFFFFF)
			return "", c, -1
		},
	},
	{
		name: "backup boot sector differs", fat32: true, kind: BackupBootMismatch, sev: Warning,
		fsckSay: "differences between boot sector and its backup",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			off := int64(v.bs.BackupBootSector) * int64(v.g.SectorSize)
			v.writeAt(t, off+3, []byte("XXXXXXXX"))
			return "", 0, -1
		},
	},
	{
		name: "dirty bit", kind: Dirty, sev: Error, fsckSay: "Dirty bit is set",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			v.writeAt(t, int64(v.bs.StateOffset()), []byte{v.bs.State | ondisk.StateDirty})
			return "", 0, -1
		},
	},
	{
		name: "file size below chain", kind: ChainLength, sev: Error, fsckSay: "cluster chain length is >",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			off := v.entry(t, "A       TXT")
			v.setSize(t, off, 1)
			return "/A.TXT", chainOf(t, v.img, "/A.TXT")[0], off
		},
	},
	{
		name: "file size beyond chain", kind: ChainLength, sev: Error, fsckSay: "Truncating file to",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			off := v.entry(t, "A       TXT")
			v.setSize(t, off, 0xFFFFFFFF)
			a := chainOf(t, v.img, "/A.TXT")
			return "/A.TXT", a[len(a)-1], off
		},
	},
	{
		name: "link out of range", kind: ClusterOutOfRange, sev: Error, fsckSay: "out of range",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			b := chainOf(t, v.img, "/B.TXT")
			v.setFAT(t, b[1], v.g.Clusters+50)
			return "", b[1], -1
		},
	},
	{
		name: "bad short name", kind: BadEntry, sev: Error, fsckSay: "Bad short file name",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			off := v.entry(t, "B       TXT")
			v.writeAt(t, off+1, []byte("?"))
			return "/B?.TXT", 0, off
		},
	},
	{
		name: "wrong dotdot", kind: DotEntries, sev: Error, fsckSay: "Invalid '..' entry",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			d2 := chainOf(t, v.img, "/D1/D2")[0]
			dotdot := v.g.ClusterOffset(d2) + 32
			v.setStart(t, dotdot, 5)
			return "/D1/D2", chainOf(t, v.img, "/D1")[0], dotdot
		},
	},
	{
		name: "directory points to its parent", kind: BadEntry, sev: Error, fsckSay: "Start does point to containing directory.",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			off := v.entry(t, "D4         ")
			d3 := chainOf(t, v.img, "/D1/D2/D3")[0]
			v.setStart(t, off, d3)
			return "/D1/D2/D3/D4", d3, off
		},
	},
	{
		name: "directory points to its grandparent", kind: BadEntry, sev: Error, fsckSay: "containing directory's parent",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			off := v.entry(t, "D4         ")
			d2 := chainOf(t, v.img, "/D1/D2")[0]
			v.setStart(t, off, d2)
			return "/D1/D2/D3/D4", d2, off
		},
	},
	{
		name: "directory loops to an ancestor", kind: CrossLink, sev: Error, fsckSay: "share clusters",
		apply: func(t *testing.T, v *vol) (string, uint32, int64) {
			off := v.entry(t, "D4         ")
			d1 := chainOf(t, v.img, "/D1")[0]
			v.setStart(t, off, d1)
			return "/D1/D2/D3/D4", d1, off
		},
	},
}

// TestHandCorruptedImages makes each fault in a clean image and requires the right kind, path,
// cluster and entry offset, and that fsck.fat -n reports the same fault with the same verdict.
func TestHandCorruptedImages(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mcopy", "mshowfat")
	for _, fatType := range []string{"16", "32"} {
		t.Run("FAT"+fatType, func(t *testing.T) {
			base := makeVol(t, fatType)
			for _, c := range corruptions {
				if c.fat32 && fatType != "32" {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					v := *base
					v.img = copyImage(t, base.img)
					path, cluster, entryOff := c.apply(t, &v)
					ref := runFsckFat(t, v.img)
					if !strings.Contains(ref.out, c.fsckSay) {
						t.Fatalf("fsck.fat -n does not say %q:\n%s", c.fsckSay, ref.out)
					}
					if c.sev == Error && ref.clean() {
						t.Fatalf("fsck.fat -n calls it clean:\n%s", ref.out)
					}
					rep, err := checkImage(t, v.img)
					if err != nil {
						t.Fatal(err)
					}
					if rep.Clean() != ref.clean() {
						t.Fatalf("verdict: ours clean=%v, fsck.fat -n exit %d\nours:\n%sfsck.fat:\n%s", rep.Clean(), ref.code, listProblems(rep), ref.out)
					}
					p := findProblem(t, rep, c.kind)
					if p.Severity != c.sev || p.Path != path || p.Cluster != cluster || p.EntryOffset != entryOff {
						t.Errorf("got %v %v path %q cluster %d entry %d; want %v path %q cluster %d entry %d\nall:\n%s",
							p.Kind, p.Severity, p.Path, p.Cluster, p.EntryOffset, c.sev, path, cluster, entryOff, listProblems(rep))
					}
					if p.Path != "" && p.Path != "/" && !strings.Contains(ref.out, p.Path) && c.kind != LFNChecksum {
						t.Errorf("fsck.fat does not name %s:\n%s", p.Path, ref.out)
					}
				})
			}
		})
	}
}
