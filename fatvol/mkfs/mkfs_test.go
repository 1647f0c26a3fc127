package mkfs_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

const (
	KiB = int64(1) << 10
	MiB = int64(1) << 20
	GiB = int64(1) << 30
)

// testVolumeID is passed to both formatters, so the boot sectors compare whole.
const testVolumeID = 0xC0FFEE42

// spec is one formatting request, spelled once and turned into both mkfs.fat's arguments and
// our Options, so the two cannot drift apart.
type spec struct {
	size                                      int64
	fatType, spc, sectorSize, numFATs, rootEn int
	label                                     string
}

func (s spec) name() string {
	n := strconv.FormatInt(s.size, 10)
	for _, f := range []struct {
		flag string
		v    int
	}{{"F", s.fatType}, {"s", s.spc}, {"S", s.sectorSize}, {"f", s.numFATs}, {"r", s.rootEn}} {
		if f.v != 0 {
			n += fmt.Sprintf("_%s%d", f.flag, f.v)
		}
	}
	if s.label != "" {
		n += "_n" + strings.ReplaceAll(s.label, " ", "-")
	}
	return n
}

// mkfsFatArgs are mkfs.fat's arguments for the spec. --invariant fixes the label entry's time
// stamp; the -i after it replaces its volume ID with ours.
func (s spec) mkfsFatArgs(img string) []string {
	args := []string{"--invariant", "-i", fmt.Sprintf("%08x", testVolumeID)}
	for _, f := range []struct {
		flag string
		v    int
	}{{"-F", s.fatType}, {"-s", s.spc}, {"-S", s.sectorSize}, {"-f", s.numFATs}, {"-r", s.rootEn}} {
		if f.v != 0 {
			args = append(args, f.flag, strconv.Itoa(f.v))
		}
	}
	if s.label != "" {
		args = append(args, "-n", s.label)
	}
	return append(args, img)
}

func (s spec) options() mkfs.Options {
	return mkfs.Options{
		FATType: ondisk.FATType(s.fatType), SectorsPerCluster: s.spc, SectorSize: s.sectorSize,
		NumFATs: s.numFATs, RootEntries: s.rootEn, Label: s.label,
		VolumeID: testVolumeID, VolumeIDSet: true, CreateTime: invariantTime,
	}
}

// sweepSizes run from below a floppy to 100 GiB, with mkfs.fat's thresholds (floppy sizes, the
// 8192-sector alignment cut-off, 260 MiB, 512 MiB, 8/16/32 GiB) and sizes that are not a
// multiple of 4 KiB or even of 1 KiB.
var sweepSizes = []int64{
	40 * KiB, 100 * KiB, 160 * KiB, 360 * KiB, 720 * KiB, MiB, 1000000, 1200 * KiB, 1440 * KiB, 1440*KiB + 700,
	2 * MiB, 2880 * KiB, 4 * MiB, 4*MiB + 512, 5 * MiB, 3333333, 16 * MiB, 32 * MiB, 33 * MiB,
	64 * MiB, 123456789, 128 * MiB, 256 * MiB, 260 * MiB, 261 * MiB, 511 * MiB, 512*MiB - 512,
	512 * MiB, 600000001, GiB, 2 * GiB, 4 * GiB, 8 * GiB, 8*GiB + 512, 16 * GiB, 32 * GiB,
	32*GiB + 4096, 64 * GiB, 64*GiB + 3*512 + 100, 100 * GiB,
}

func sweepSpecs() []spec {
	var specs []spec
	for _, size := range sweepSizes {
		for _, ft := range []int{0, 12, 16, 32} {
			specs = append(specs, spec{size: size, fatType: ft})
		}
	}
	return append(specs,
		// -s: fixed cluster sizes, fitting and not.
		spec{size: 64 * MiB, spc: 1}, spec{size: 64 * MiB, spc: 128}, spec{size: 16 * MiB, spc: 16},
		spec{size: 5 * MiB, fatType: 12, spc: 2}, spec{size: 32 * MiB, fatType: 12, spc: 8},
		spec{size: GiB, fatType: 32, spc: 1}, spec{size: GiB, fatType: 32, spc: 64},
		spec{size: 2 * GiB, fatType: 16, spc: 64}, spec{size: 4 * GiB, fatType: 16, spc: 128},
		spec{size: 32 * GiB, spc: 128}, spec{size: 300 * MiB, spc: 2}, spec{size: MiB, spc: 128},
		spec{size: 64 * MiB, spc: 3}, spec{size: 64 * MiB, spc: 256},
		// -S: larger logical sectors.
		spec{size: 64 * MiB, sectorSize: 1024}, spec{size: 64 * MiB, sectorSize: 4096},
		spec{size: GiB, sectorSize: 4096}, spec{size: 8 * GiB, sectorSize: 2048},
		spec{size: 1440 * KiB, sectorSize: 4096}, spec{size: MiB, sectorSize: 4096},
		spec{size: 512 * MiB, fatType: 16, sectorSize: 4096}, spec{size: 3333333, sectorSize: 2048},
		spec{size: 64 * GiB, sectorSize: 4096, spc: 16}, spec{size: 64 * MiB, sectorSize: 256},
		spec{size: 64 * MiB, sectorSize: 1000},
		// -f: one to four FATs.
		spec{size: 64 * MiB, numFATs: 1}, spec{size: GiB, numFATs: 1}, spec{size: 1440 * KiB, numFATs: 3},
		spec{size: 8 * GiB, numFATs: 4}, spec{size: 64 * MiB, numFATs: 5},
		// -r: root directory sizes, rounded up to whole (aligned) sectors.
		spec{size: 64 * MiB, rootEn: 16}, spec{size: 64 * MiB, rootEn: 100}, spec{size: 1440 * KiB, rootEn: 100},
		spec{size: 2 * MiB, rootEn: 1000}, spec{size: 64 * MiB, rootEn: 32768}, spec{size: GiB, rootEn: 100},
		spec{size: 64 * MiB, rootEn: 8}, spec{size: 64 * MiB, rootEn: 40000},
		// -n: labels, valid and not.
		spec{size: 64 * MiB, label: "TESTFAT16"}, spec{size: 1440 * KiB, label: "my disk"},
		spec{size: GiB, label: "HELLO WORLD"}, spec{size: 64 * MiB, label: "NO NAME"},
		spec{size: 64 * MiB, label: "bad*name"}, spec{size: 64 * MiB, label: "TWELVE CHARS"},
		spec{size: 64 * MiB, label: " LEADING"}, spec{size: 64 * MiB, label: "dots.bad"},
		spec{size: 64 * MiB, label: "caf\u00e9"},
		// Combinations.
		spec{size: 4 * GiB, fatType: 32, spc: 8, sectorSize: 1024, numFATs: 1, label: "COMBO"},
		spec{size: 200 * MiB, fatType: 16, spc: 32, numFATs: 3, rootEn: 1024, label: "F16"},
		spec{size: 3 * MiB, fatType: 12, sectorSize: 2048, rootEn: 64, numFATs: 1},
	)
}

// TestMatchesMkfsFat formats the same sizes with the same options with mkfs.fat and with Format
// and requires the same outcome: both refuse, or both write byte-identical metadata (boot sector
// fields compared one by one for a readable report), and our volume passes fsck.fat and mtools.
func TestMatchesMkfsFat(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat", "mdir", "fatlabel")
	for _, s := range sweepSpecs() {
		t.Run(s.name(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			theirs, ours := filepath.Join(dir, "mkfs.fat.img"), filepath.Join(dir, "ours.img")
			sparseFile(t, theirs, s.size)
			out, theyOK := run(t, "mkfs.fat", s.mkfsFatArgs(theirs)...)
			g, err := formatImage(t, ours, s.size, s.options())
			if !theyOK {
				if err == nil {
					t.Fatalf("mkfs.fat refused (%s) but Format made %s with %d clusters", strings.TrimSpace(out), g.Type, g.Clusters)
				}
				t.Logf("both refuse: mkfs.fat %q; ours: %v", lastLine(out), err)
				return
			}
			if err != nil {
				t.Fatalf("mkfs.fat succeeded but Format failed: %v", err)
			}
			want := readBootSector(t, theirs)
			patch := roundRootEntries(t, want)
			if d := fieldDiffs(readBootSector(t, ours), want); d != nil {
				t.Errorf("boot sector fields differ:\n  %s", strings.Join(d, "\n  "))
			}
			compareMetadata(t, ours, theirs, g, patch)
			checkTools(t, ours, theirs, g, s.label, patch != nil)
		})
	}
}

// roundRootEntries applies our one deliberate difference to mkfs.fat's boot sector: when it
// writes a root entry count that does not fill whole sectors (unaligned volumes with -r), which
// fsck.fat and Linux refuse, we round the count up. It returns the patch for the raw boot
// sector, or nil when mkfs.fat's count is already whole sectors.
func roundRootEntries(t *testing.T, bs *ondisk.BootSector) func([]byte) {
	perSector := int(bs.BytesPerSector) / ondisk.DirEntrySize
	n := int(bs.RootEntries)
	if n%perSector == 0 {
		return nil
	}
	bs.RootEntries = uint16((n + perSector - 1) / perSector * perSector)
	t.Logf("known difference: mkfs.fat writes %d root entries, ours %d", n, bs.RootEntries)
	return func(p []byte) { bs.Marshal(p[:512]) }
}

// lastLine is the last line of a tool's output that is not its version banner.
func lastLine(s string) string {
	last := ""
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if !strings.HasPrefix(l, "mkfs.fat 4") && !strings.HasPrefix(l, "fatlabel 4") {
			last = l
		}
	}
	return last
}

// checkTools runs fsck.fat, mdir and fatlabel on our image and on mkfs.fat's. fsck.fat must
// pass ours and say nothing beyond its summary, except what it also says of mkfs.fat's image: the
// small-FAT32 warning, or (with 3 or 4 FATs) that it cannot check the volume at all. mdir must
// list ours whenever it lists theirs, and always unless the volume is a FAT32 with fewer than
// 65525 clusters (mtools tells the type by the cluster count). fatlabel must read the label.
func checkTools(t *testing.T, ours, theirs string, g ondisk.Geometry, label string, theirsBroken bool) {
	t.Helper()
	fsckOurs, ok := fsckOutput(t, ours)
	fsckTheirs, _ := fsckOutput(t, theirs)
	if fsckOurs != fsckTheirs && !theirsBroken {
		t.Errorf("fsck.fat says on ours:\n%s\nand on mkfs.fat's:\n%s", fsckOurs, fsckTheirs)
	}
	smallFAT32 := g.Type == ondisk.FAT32 && g.Clusters < 65525
	fsckCannotCheck := g.NumFATs > 2
	switch {
	case fsckCannotCheck:
		t.Logf("fsck.fat cannot check %d FATs, on mkfs.fat's image either: %s", g.NumFATs, fsckOurs)
		return
	case !ok:
		t.Errorf("fsck.fat -n fails on our image:\n%s", fsckOurs)
	case strings.Contains(fsckOurs, "\n") && !smallFAT32:
		t.Errorf("fsck.fat warns on our image:\n%s", fsckOurs)
	}

	mdirOurs, okOurs := run(t, "mdir", "-i", ours, "::")
	_, okTheirs := run(t, "mdir", "-i", theirs, "::")
	if !okOurs && (okTheirs || !smallFAT32) {
		t.Errorf("mdir -i IMG :: fails on our image (on mkfs.fat's too: %v):\n%s", !okTheirs, mdirOurs)
	}

	got := stdout(t, "fatlabel", ours)
	if theirsBroken {
		// fatlabel refuses mkfs.fat's image like fsck.fat does.
	} else if theirLabel := stdout(t, "fatlabel", theirs); got != theirLabel {
		t.Errorf("fatlabel reads %q on ours, %q on mkfs.fat's", got, theirLabel)
	}
	if want := strings.TrimRight(label, " "); want != "" && want != "NO NAME" && strings.TrimSpace(got) != want {
		t.Errorf("fatlabel reads label %q, want %q", got, want)
	}
	if label != "" && label != "NO NAME" && okOurs {
		out, _ := run(t, "mlabel", "-s", "-i", ours, "::")
		if !strings.Contains(out, "Volume label is "+strings.TrimRight(label, " ")) {
			t.Errorf("mlabel -s reads %q, want label %q", out, label)
		}
	}
}
