package mkfs_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// TestGrowableLayouts formats volumes with room to grow (Options.MaxSize): the FAT type and
// cluster size suit both sizes (at the size at least the type's minimum of clusters, so every
// reader agrees on the type), the FATs cover MaxSize, fsck.fat -n finds the volume clean and
// minfo reads it. A MaxSize no larger than the size is mkfs.fat's layout, byte for byte the
// same boot sector; sizes no layout suits are refused.
func TestGrowableLayouts(t *testing.T) {
	needTools(t, "fsck.fat", "minfo")
	for _, c := range []struct {
		size, maxSize int64
		opts          mkfs.Options
		typ           ondisk.FATType
		cluster       int
	}{
		{size: 1 << 20, maxSize: 4 << 20, typ: ondisk.FAT12, cluster: 2048},
		{size: 8 << 20, maxSize: 64 << 20, typ: ondisk.FAT16, cluster: 1024},
		{size: 64 << 20, maxSize: 256 << 20, typ: ondisk.FAT16, cluster: 4096},
		{size: 64 << 20, maxSize: 1 << 30, typ: ondisk.FAT32, cluster: 512},
		{size: 1 << 30, maxSize: 5 << 30, typ: ondisk.FAT32, cluster: 4096},
		{size: 40 << 20, maxSize: 48 << 20, opts: mkfs.Options{FATType: ondisk.FAT32}, typ: ondisk.FAT32, cluster: 512},
	} {
		opts := c.opts
		opts.MaxSize = c.maxSize
		img := filepath.Join(t.TempDir(), "room.img")
		g, err := formatImage(t, img, c.size, opts)
		if err != nil {
			t.Errorf("%d -> %d: %v", c.size, c.maxSize, err)
			continue
		}
		limit := g.MaxGrowSectors() * int64(g.SectorSize)
		if g.Type != c.typ || g.ClusterSize != c.cluster || limit < c.maxSize || g.TotalSectors*int64(g.SectorSize) > c.size {
			t.Errorf("%d -> %d: %s, %d-byte clusters, %d sectors, grows to %d; want %s, %d, to at least %d",
				c.size, c.maxSize, g.Type, g.ClusterSize, g.TotalSectors, limit, c.typ, c.cluster, c.maxSize)
		}
		if out, ok := fsckOutput(t, img); !ok || strings.Count(out, "\n") != 0 {
			t.Errorf("%d -> %d: fsck.fat -n:\n%s", c.size, c.maxSize, out)
		}
		if out := stdout(t, "minfo", "-i", img, "::"); !strings.Contains(out, fmt.Sprintf("cluster size: %d sectors", c.cluster/512)) {
			t.Errorf("%d -> %d: minfo:\n%s", c.size, c.maxSize, out)
		}
	}

	plain, err := mkfs.Plan(64<<20, mkfs.Options{VolumeIDSet: true})
	if err != nil {
		t.Fatal(err)
	}
	same, err := mkfs.Plan(64<<20, mkfs.Options{VolumeIDSet: true, MaxSize: 64 << 20})
	if err != nil || *same != *plain {
		t.Errorf("MaxSize equal to the size: %+v, %v; want mkfs.fat's %+v", same, err, plain)
	}

	for _, c := range [][2]int64{{16 << 20, 256 << 20}, {4 << 20, 1 << 30}} {
		if _, err := mkfs.Plan(c[0], mkfs.Options{MaxSize: c[1]}); !errors.Is(err, mkfs.ErrNoFit) {
			t.Errorf("%d growing to %d: %v, want ErrNoFit", c[0], c[1], err)
		}
	}
	if _, err := mkfs.Plan(64<<20, mkfs.Options{MaxSize: -1}); !errors.Is(err, mkfs.ErrInvalidOption) {
		t.Errorf("negative MaxSize: %v", err)
	}
}
