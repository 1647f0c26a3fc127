package fatfuse

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/internal/judge"
)

// fsckCount runs fsck.fat -n and returns its count of used and total clusters.
func fsckCount(t *testing.T, img string) (used, total uint64) {
	t.Helper()
	out, _ := exec.Command("fsck.fat", "-n", img).CombinedOutput()
	m := regexp.MustCompile(`(\d+) files, (\d+)/(\d+) clusters`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("fsck.fat -n %s printed no count:\n%s", img, out)
	}
	used, _ = strconv.ParseUint(string(m[2]), 10, 64)
	total, _ = strconv.ParseUint(string(m[3]), 10, 64)
	return used, total
}

// checkStage writes the volume back and requires statfs(2) on the mount to agree with
// fsck.fat's count of free clusters on the image, and both judges to find nothing but the dirty
// bit of a mounted volume.
func (m *mounted) checkStage(stage string) (free uint64) {
	m.t.Helper()
	// A file removed just before is let go when the kernel forgets it (a FUSE node lives until
	// then); wait for that, as statfs and fsync of a directory do, before syncing from here.
	m.srv.settle()
	if err := m.vol.Sync(); err != nil {
		m.t.Fatalf("%s: sync: %v", stage, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(m.dir, &st); err != nil {
		m.t.Fatal(err)
	}
	used, total := fsckCount(m.t, m.img)
	if st.Blocks != total || st.Bfree != total-used || st.Bavail != st.Bfree {
		m.t.Errorf("%s: statfs says %d/%d clusters free (avail %d), fsck.fat counts %d/%d used", stage, st.Bfree, st.Blocks, st.Bavail, used, total)
	}
	if err := judge.Check(m.img, fsck.Dirty); err != nil {
		m.t.Errorf("%s: %v", stage, err)
	}
	return st.Bfree * uint64(st.Bsize)
}

func errnoOfErr(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// TestFullVolumeThroughMount fills small FAT12/16/32 volumes through the mount with many small
// files, then one file written in ever smaller pieces: write(2) fails with ENOSPC exactly when the
// bytes written equal the free space statfs reported, appends into a cluster's slack still work,
// fallocate and mkdir fail with ENOSPC, nothing written before is damaged, fsck.fat finds the
// volume clean and agrees with statfs at every stage, and removing the big file makes the space
// usable again.
func TestFullVolumeThroughMount(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	for _, tc := range []struct {
		name    string
		sizeKiB int
		args    []string
	}{
		{"FAT12", 1024, []string{"-F", "12"}},
		{"FAT16", 16 << 10, []string{"-F", "16"}},
		{"FAT32", 34 << 10, []string{"-F", "32", "-s", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := makeImage(t, tc.sizeKiB, tc.args...)
			m := mountImage(t, img, "")
			cs := int(m.vol.Geometry().ClusterSize)
			r := rand.New(rand.NewPCG(8, 8))
			startFree := m.checkStage("new volume")

			// Many small files, up to a third of the space, in a directory: sizes around a
			// cluster, so some end exactly on a cluster boundary and some leave slack.
			if err := os.Mkdir(m.path("small"), 0o755); err != nil {
				t.Fatal(err)
			}
			small := map[string][]byte{}
			var exact, slack string
			for total := uint64(0); total < startFree/3 && len(small) < 600; {
				size := 1 + r.IntN(2*cs)
				if len(small)%5 == 0 {
					size = cs
				}
				name := fmt.Sprintf("small/f%04d", len(small))
				data := make([]byte, size)
				for i := range data {
					data[i] = byte(r.Uint32())
				}
				if err := os.WriteFile(m.path(name), data, 0o644); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				small[name] = data
				total += uint64((size + cs - 1) / cs * cs)
				switch {
				case size == cs && exact == "":
					exact = name
				case size%cs != 0 && size%cs < cs-1 && slack == "":
					slack = name
				}
			}
			before := m.checkStage("small files")

			// One file grows until the volume is full: big writes, then a cluster, then a byte
			// at a time into the last cluster.
			big, err := os.OpenFile(m.path("big"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			var written int
			for _, chunk := range []int{64 * cs, cs, 1} {
				for {
					n, err := big.Write(make([]byte, chunk))
					written += n
					if err != nil {
						if errnoOfErr(err) != syscall.ENOSPC || n != 0 {
							t.Fatalf("write of %d bytes after %d: wrote %d, %v; want 0, ENOSPC", chunk, written, n, err)
						}
						break
					}
				}
			}
			if uint64(written) != before {
				t.Errorf("wrote %d bytes before ENOSPC; statfs said %d bytes were free", written, before)
			}
			if err := big.Close(); err != nil {
				t.Fatal(err)
			}
			if free := m.checkStage("full"); free != 0 {
				t.Errorf("statfs says %d bytes free on a full volume", free)
			}

			// On the full volume: what needs a cluster fails, what fits in slack works.
			if err := os.Mkdir(m.path("more"), 0o755); errnoOfErr(err) != syscall.ENOSPC {
				t.Errorf("mkdir on a full volume: %v, want ENOSPC", err)
			}
			if err := appendTo(m.path(exact), []byte("x")); errnoOfErr(err) != syscall.ENOSPC {
				t.Errorf("append to %s, whose last cluster is full: %v, want ENOSPC", exact, err)
			}
			if err := appendTo(m.path(slack), []byte("y")); err != nil {
				t.Errorf("append into the slack of %s: %v", slack, err)
			} else {
				small[slack] = append(small[slack], 'y')
			}
			fa, err := os.OpenFile(m.path("alloc"), os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				t.Fatalf("create an empty file on a full volume: %v", err)
			}
			if err := unix.Fallocate(int(fa.Fd()), 0, 0, int64(cs)); errnoOfErr(err) != syscall.ENOSPC {
				t.Errorf("fallocate on a full volume: %v, want ENOSPC", err)
			}
			fa.Close()
			if st, err := os.Stat(m.path("alloc")); err != nil || st.Size() != 0 {
				t.Errorf("the file fallocate failed on: %v, %v; want it empty", st, err)
			}
			m.checkStage("full, after the refused changes")
			for name, want := range small {
				if got, err := os.ReadFile(m.path(name)); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s on the full volume: %d bytes, %v; want its %d bytes", name, len(got), err, len(want))
				}
			}

			// Removing the big file gives its space back, to files and directories alike.
			if err := os.Remove(m.path("big")); err != nil {
				t.Fatal(err)
			}
			if free := m.checkStage("big file removed"); free != before {
				t.Errorf("after removing the big file %d bytes free, want the %d before it", free, before)
			}
			again := bytes.Repeat([]byte("again"), int(before)/10)
			if err := os.WriteFile(m.path("again"), again, 0o644); err != nil {
				t.Fatalf("writing after freeing space: %v", err)
			}
			if err := os.Mkdir(m.path("more"), 0o755); err != nil {
				t.Fatalf("mkdir after freeing space: %v", err)
			}
			m.checkStage("written again")
			m.unmount()
			if err := judge.Check(img); err != nil {
				t.Error(err)
			}
			m2 := mountImage(t, img, "ro")
			for name, want := range small {
				if got, err := os.ReadFile(m2.path(name)); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s after remounting: %d bytes, %v; want its %d bytes", name, len(got), err, len(want))
				}
			}
			if got, err := os.ReadFile(m2.path("again")); err != nil || !bytes.Equal(got, again) {
				t.Errorf("again after remounting: %d bytes, %v", len(got), err)
			}
		})
	}
}

// TestFixedRootFullThroughMount: FAT12/16's root directory has a fixed number of entries; once
// they are used, creating a file or directory there fails with ENOSPC even with clusters free,
// the volume stays clean, and removing one makes room for one.
func TestFixedRootFullThroughMount(t *testing.T) {
	needTools(t, "mkfs.fat", "fsck.fat")
	for _, tc := range []struct {
		name    string
		sizeKiB int
		args    []string
	}{
		{"FAT12", 4 << 10, []string{"-F", "12", "-r", "64"}},
		{"FAT16", 16 << 10, []string{"-F", "16", "-r", "32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := makeImage(t, tc.sizeKiB, tc.args...)
			m := mountImage(t, img, "")
			entries := m.vol.Geometry().RootEntries
			// Upper-case 8.3 names take one entry each.
			n := 0
			for ; ; n++ {
				err := os.WriteFile(m.path(fmt.Sprintf("F%04d.TXT", n)), []byte{byte(n)}, 0o644)
				if err != nil {
					if errnoOfErr(err) != syscall.ENOSPC {
						t.Fatalf("creating root entry %d: %v, want ENOSPC", n, err)
					}
					break
				}
				if n > entries {
					t.Fatalf("created %d files in a root of %d entries", n, entries)
				}
			}
			if n != entries {
				t.Errorf("created %d files before ENOSPC in a root of %d entries", n, entries)
			}
			if err := os.Mkdir(m.path("DIR"), 0o755); errnoOfErr(err) != syscall.ENOSPC {
				t.Errorf("mkdir in a full root: %v, want ENOSPC", err)
			}
			if free := m.checkStage("root full"); free == 0 {
				t.Errorf("no clusters free: the test wants the root full, not the volume")
			}
			if err := os.Remove(m.path("F0000.TXT")); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(m.path("DIR"), 0o755); err != nil {
				t.Errorf("mkdir after removing a root entry: %v", err)
			}
			m.checkStage("one entry freed and used")
			for i := 1; i < n; i++ {
				if got, err := os.ReadFile(m.path(fmt.Sprintf("F%04d.TXT", i))); err != nil || !bytes.Equal(got, []byte{byte(i)}) {
					t.Fatalf("F%04d.TXT: %v, %v", i, got, err)
				}
			}
			m.unmount()
			if err := judge.Check(img); err != nil {
				t.Error(err)
			}
		})
	}
}

func appendTo(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
