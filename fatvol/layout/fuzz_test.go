package layout

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// FuzzRead feeds Read and Probe any medium: Read must return a layout whose partitions lie inside
// the medium and do not overlap, or an error; Probe a FAT volume inside the medium or a reason;
// neither may panic or allocate beyond its bounds. Seeds are real
// tables (sfdisk's, when it is installed, and mkfs.fat's boot sectors) and hand-built ones.
func FuzzRead(f *testing.F) {
	const sectors = 256
	for _, build := range []func(img []byte){
		func(img []byte) { setMBREntry(img, 0, 0x80, 0x0c, 8, 100); setMBREntry(img, 1, 0, 0x83, 108, 100) },
		func(img []byte) {
			setMBREntry(img, 0, 0, 0x0f, 8, 200)
			setMBREntry(img[8*512:], 0, 0, 0x0e, 2, 40)
			setMBREntry(img[8*512:], 1, 0, 0x05, 50, 100)
			setMBREntry(img[58*512:], 0, 0, 0x0b, 2, 40)
		},
		func(img []byte) {
			writeGPT(img, []gptPart{{GUIDEFISystem, 34, 100}, {GUIDBasicData, 101, 200}}, nil)
		},
	} {
		img := make([]byte, sectors*512)
		build(img)
		f.Add(img)
	}
	if _, err := exec.LookPath("sfdisk"); err == nil {
		for _, script := range []string{
			"label: dos\nstart=8, size=64, type=c\nstart=72, size=100, type=5\nstart=80, size=20, type=6\nstart=104, size=20, type=83\n",
			"label: gpt\nfirst-lba: 34\nstart=40, size=60, type=EBD0A0A2-B9E5-4433-87C0-68B6B72699C7\nstart=100, size=50, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B\n",
		} {
			dir := f.TempDir()
			img := filepath.Join(dir, "seed.img")
			os.WriteFile(img, make([]byte, sectors*512), 0o600)
			cmd := exec.Command("sfdisk", "--no-reread", "--no-tell-kernel", "-q", img)
			cmd.Stdin = strings.NewReader(script)
			if out, err := cmd.CombinedOutput(); err != nil {
				f.Fatalf("sfdisk: %v\n%s", err, out)
			}
			b, _ := os.ReadFile(img)
			f.Add(b)
		}
	}
	if _, err := exec.LookPath("mkfs.fat"); err == nil {
		img := filepath.Join(f.TempDir(), "fat.img")
		if out, err := exec.Command("mkfs.fat", "-C", img, "128").CombinedOutput(); err != nil {
			f.Fatalf("mkfs.fat: %v\n%s", err, out)
		}
		b, _ := os.ReadFile(img)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Probe reads whatever the medium holds and names it, without panicking.
		if r, err := Probe(memMedium{b, 512}); err == nil && r.Usable && r.FAT.Start+r.FAT.Size > int64(len(b)) {
			t.Fatalf("Probe found FAT in %v, past the %d-byte medium", r.FAT, len(b))
		} else if err == nil && !r.Usable && r.Reason == "" {
			t.Fatal("Probe found no FAT and gave no reason")
		}
		l, err := Read(memMedium{b, 512})
		if err != nil {
			return
		}
		ps := append([]Partition(nil), l.Partitions...)
		sort.Slice(ps, func(i, j int) bool { return ps[i].Start < ps[j].Start })
		for i, p := range ps {
			if p.Start < 0 || p.Size <= 0 || p.Start+p.Size > int64(len(b)) {
				t.Fatalf("%v is not inside the %d-byte medium", p, len(b))
			}
			if i > 0 && p.Start < ps[i-1].Start+ps[i-1].Size {
				t.Fatalf("%v overlaps %v", p, ps[i-1])
			}
		}
		for _, p := range l.Partitions {
			if q, ok := l.Partition(p.ID()); p.Number != 0 && (!ok || q != p) {
				t.Fatalf("partition %s not found by its identity", p.ID())
			}
		}
	})
}
