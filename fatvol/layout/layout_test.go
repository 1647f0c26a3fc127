package layout

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestTablesLikeSfdisk reads tables sfdisk wrote and requires what sfdisk --json reads back:
// every partition's number, start, size, type and (GPT) unique GUID and name.
func TestTablesLikeSfdisk(t *testing.T) {
	cases := []struct {
		name, script string
		kind         Kind
		fat          []int // numbers of the partitions whose type is FAT
	}{
		{"mbr-fat32-linux-logical", "label: dos\nstart=2048, size=20480, type=c, bootable\nstart=22528, size=20480, type=83\n" +
			"start=43008, size=40960, type=5\nstart=45056, size=8192, type=e\nstart=55296, size=8192, type=82\n", MBR, []int{1, 5}},
		{"mbr-linux-first", "label: dos\nstart=2048, size=20480, type=83\nstart=22528, size=20480, type=6\n", MBR, []int{2}},
		{"mbr-to-the-end", "label: dos\nstart=2048, type=b\n", MBR, []int{1}},
		{"mbr-hidden-and-others", "label: dos\nstart=2048, size=8192, type=1c\nstart=10240, size=8192, type=7\nstart=18432, size=8192, type=11\n", MBR, []int{1, 3}},
		{"mbr-no-fat", "label: dos\nstart=2048, size=20480, type=83\nstart=22528, type=8e\n", MBR, nil},
		{"gpt-esp-linux-data", "label: gpt\nstart=2048, size=8192, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=\"EFI system\"\n" +
			"start=10240, size=20480, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n" +
			"start=30720, size=20480, type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7, name=\"Daten\u00e4\"\n", GPT, []int{1, 3}},
		{"gpt-to-the-end", "label: gpt\nstart=2048, type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7\n", GPT, []int{1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := sfdiskImage(t, 64<<20, c.script)
			want := sfdiskDump(t, img)
			l, err := readImage(t, img)
			if err != nil {
				t.Fatal(err)
			}
			if l.Kind != c.kind {
				t.Fatalf("kind %v, want %v", l.Kind, c.kind)
			}
			if !strings.EqualFold(strings.TrimPrefix(want.ID, "0x"), l.DiskID) {
				t.Errorf("disk ID %s, sfdisk says %s", l.DiskID, want.ID)
			}
			var got []string
			var fat []int
			for _, p := range l.Partitions {
				typ := fmt.Sprintf("%x", p.MBRType)
				if p.TypeGUID != "" {
					typ = p.TypeGUID
				}
				got = append(got, fmt.Sprintf("%d %d %d %s %s %s", p.Number, p.Start/512, p.Size/512, typ, p.GUID, p.Name))
				if p.IsFATType() {
					fat = append(fat, p.Number)
				}
			}
			var exp []string
			for _, p := range want.Partitions {
				num, err := strconv.Atoi(strings.TrimPrefix(p.Node, img))
				if err != nil {
					t.Fatalf("sfdisk node %q: %v", p.Node, err)
				}
				if p.Type == "5" || p.Type == "f" || p.Type == "85" {
					continue // the extended container is not a partition that holds a file system
				}
				exp = append(exp, fmt.Sprintf("%d %d %d %s %s %s", num, p.Start, p.Size, p.Type, p.UUID, p.Name))
			}
			if strings.Join(got, "\n") != strings.Join(exp, "\n") {
				t.Errorf("partitions:\n%s\nsfdisk --json:\n%s", strings.Join(got, "\n"), strings.Join(exp, "\n"))
			}
			if fmt.Sprint(fat) != fmt.Sprint(c.fat) {
				t.Errorf("FAT-type partitions %v, want %v", fat, c.fat)
			}
		})
	}
}

// TestGPTBackup: a damaged primary header or entry array is replaced by the backup at the last
// sector, as libblkid and sfdisk do; with both damaged the table is refused.
func TestGPTBackup(t *testing.T) {
	script := "label: gpt\nstart=2048, size=8192, type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7\nstart=10240, size=8192, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4\n"
	for _, c := range []struct {
		name string
		off  int64 // byte to flip, from the start (>= 0) or the end (< 0)
		ok   bool
	}{
		{"primary-header", 512 + 60, true},
		{"primary-entries", 1024 + 20, true},
		{"both-headers", 512 + 60, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := sfdiskImage(t, 16<<20, script)
			want, err := readImage(t, img)
			if err != nil || want.BackupGPT {
				t.Fatalf("intact table: %v (backup used: %v)", err, want.BackupGPT)
			}
			flip(t, img, c.off)
			if c.name == "both-headers" {
				flip(t, img, -512+60)
			}
			l, err := readImage(t, img)
			if !c.ok {
				if !errors.Is(err, ErrInvalidTable) || !strings.Contains(err.Error(), "backup") {
					t.Fatalf("both headers damaged: %v, want an invalid-table error naming primary and backup", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !l.BackupGPT {
				t.Error("the backup GPT was not used")
			}
			if fmt.Sprint(l.Partitions) != fmt.Sprint(want.Partitions) {
				t.Errorf("from the backup: %v\nfrom the primary: %v", l.Partitions, want.Partitions)
			}
		})
	}
}

func flip(t *testing.T, img string, off int64) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if off < 0 {
		st, _ := f.Stat()
		off += st.Size()
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xFF
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestSuperfloppy: a FAT boot sector at sector 0 is the whole medium, with its 0x55AA, with
// mkfs.fat's one-partition MBR in its boot code, and without the signature.
func TestSuperfloppy(t *testing.T) {
	testenv.RequireTool(t, "mkfs.fat")
	for _, c := range []struct {
		name string
		args []string
		sig  bool
	}{
		{"fat16", []string{"-F", "16"}, true},
		{"fat32-mbr", []string{"-F", "32", "--mbr=y"}, true},
		{"fat12-no-signature", []string{"-F", "12"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "sf.img")
			if out, err := exec.Command("mkfs.fat", append(append(c.args, "-C", img), "65536")...).CombinedOutput(); err != nil {
				t.Fatalf("mkfs.fat: %v\n%s", err, out)
			}
			if !c.sig {
				f, _ := os.OpenFile(img, os.O_RDWR, 0)
				f.WriteAt([]byte{0, 0}, 510)
				f.Close()
			}
			l, err := readImage(t, img)
			if err != nil {
				t.Fatal(err)
			}
			if l.Kind != Superfloppy || len(l.Partitions) != 1 || l.Partitions[0].Size != 64<<20 || l.Partitions[0].Number != 0 {
				t.Fatalf("got %v %v, want a superfloppy spanning the medium", l.Kind, l.Partitions)
			}
		})
	}
}

// TestHostileTables: tables no tool writes are refused with an error that says what is wrong.
func TestHostileTables(t *testing.T) {
	const sectors = 4096
	basic := GUIDBasicData
	cases := []struct {
		name  string
		build func(img []byte)
		want  string
	}{
		{"overlap", func(img []byte) {
			setMBREntry(img, 0, 0, 0x0c, 100, 1000)
			setMBREntry(img, 1, 0, 0x83, 1000, 100)
		}, "overlaps"},
		{"past-the-end", func(img []byte) { setMBREntry(img, 0, 0, 0x0c, 100, sectors) }, "past the end"},
		{"at-sector-0", func(img []byte) { setMBREntry(img, 0, 0, 0x0c, 0, 100) }, "sector 0"},
		{"two-extended", func(img []byte) {
			setMBREntry(img, 0, 0, 0x05, 100, 100)
			setMBREntry(img, 1, 0, 0x0f, 300, 100)
		}, "two extended"},
		{"ebr-loop", func(img []byte) {
			setMBREntry(img, 0, 0, 0x05, 100, 1000)
			ebr := img[100*512:]
			setMBREntry(ebr, 0, 0, 0x0c, 10, 10)
			setMBREntry(ebr, 1, 0, 0x05, 200, 50) // to the record at sector 300
			ebr2 := img[300*512:]
			setMBREntry(ebr2, 0, 0, 0x0c, 10, 10)
			setMBREntry(ebr2, 1, 0, 0x05, 0, 50) // and back to the first
		}, "loops"},
		{"ebr-long-chain", func(img []byte) {
			setMBREntry(img, 0, 0, 0x05, 1, sectors-1)
			for i := 0; i < sectors-2; i++ {
				ebr := img[(1+i)*512:]
				setMBREntry(ebr, 1, 0, 0x05, uint32(i+1), 1)
			}
		}, "more than"},
		{"logical-outside", func(img []byte) {
			setMBREntry(img, 0, 0, 0x05, 100, 100)
			setMBREntry(img[100*512:], 0, 0, 0x0c, 10, 1000)
		}, "not inside"},
		{"gpt-absurd-count", func(img []byte) {
			writeGPT(img, []gptPart{{basic, 100, 200}}, func(h []byte, _ bool) { h[80], h[81], h[82], h[83] = 0, 0, 0, 1 })
		}, "entries is more than"},
		{"gpt-entry-size", func(img []byte) {
			writeGPT(img, []gptPart{{basic, 100, 200}}, func(h []byte, _ bool) { h[84] = 0; h[85] = 1 })
		}, "entry size"},
		{"gpt-outside-usable", func(img []byte) { writeGPT(img, []gptPart{{basic, 2, 200}}, nil) }, "outside the usable"},
		{"gpt-overlap", func(img []byte) { writeGPT(img, []gptPart{{basic, 100, 200}, {basic, 150, 300}}, nil) }, "overlaps"},
		{"gpt-usable-past-end", func(img []byte) {
			writeGPT(img, []gptPart{{basic, 100, 200}}, func(h []byte, _ bool) { h[55] = 0x10 })
		}, "usable sectors"},
		{"gpt-header-size", func(img []byte) {
			writeGPT(img, []gptPart{{basic, 100, 200}}, func(h []byte, _ bool) { h[12], h[13] = 0, 0x10 })
		}, "header size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := make([]byte, sectors*512)
			c.build(img)
			_, err := Read(memMedium{img, 512})
			if !errors.Is(err, ErrInvalidTable) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an invalid-table error saying %q", err, c.want)
			}
		})
	}
}

// TestNotATable: no signature, or boot indicators that are neither 0 nor 0x80, is no table.
func TestNotATable(t *testing.T) {
	img := make([]byte, 1<<20)
	if l, err := Read(memMedium{img, 512}); err != nil || l.Kind != Unknown {
		t.Fatalf("zeroes: %v %v", l, err)
	}
	setMBREntry(img, 0, 0x12, 0x0c, 100, 100)
	if l, err := Read(memMedium{img, 512}); err != nil || l.Kind != Unknown {
		t.Fatalf("boot indicator 0x12: %v %v", l, err)
	}
}
