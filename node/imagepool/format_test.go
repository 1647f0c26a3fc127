package imagepool

import (
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/node/volume"
)

// TestGrowthRoom: the StorageClass parameter maxSize, and the default room: the type and
// cluster size mkfs.fat picks for the size, FATs for up to 8 times the size within the type's
// limit at that cluster size and 4 MiB more FAT per copy.
func TestGrowthRoom(t *testing.T) {
	for _, c := range []struct {
		size       int64
		params     map[string]string
		typ        ondisk.FATType
		cluster    int
		minLimit   int64 // the limit is at least this
		maxLimit   int64 // and at most this
		extraFAT   int64 // bytes per FAT copy beyond mkfs.fat's, at most
		wantRefuse bool
	}{
		{size: 4 << 20, typ: ondisk.FAT12, cluster: 2048, minLimit: 8<<20 - 512<<10, maxLimit: 8<<20 + 16<<10, extraFAT: 4 << 10},
		{size: 64 << 20, typ: ondisk.FAT16, cluster: 2048, minLimit: 127 << 20, maxLimit: 128<<20 + 512<<10, extraFAT: 128 << 10},
		{size: 1 << 30, typ: ondisk.FAT32, cluster: 4096, minLimit: 5 << 30, maxLimit: 5<<30 + 8<<20, extraFAT: 4 << 20},
		{size: 64 << 20, params: map[string]string{volume.ParamMaxSize: "1Gi"}, typ: ondisk.FAT32, cluster: 512, minLimit: 1 << 30, maxLimit: 1<<30 + 1<<20, extraFAT: 8 << 20},
		{size: 64 << 20, params: map[string]string{volume.ParamMaxSize: "256Mi"}, typ: ondisk.FAT16, cluster: 4096, minLimit: 256 << 20, maxLimit: 257 << 20, extraFAT: 128 << 10},
		{size: 64 << 20, params: map[string]string{volume.ParamMaxSize: "32Mi"}, wantRefuse: true},
		{size: 16 << 20, params: map[string]string{volume.ParamMaxSize: "1Gi"}, wantRefuse: true}, // FAT16 grows 16-fold at most, FAT32 needs 33 MiB
	} {
		p, err := volume.ParseParams(c.params)
		if err != nil {
			t.Fatal(err)
		}
		limit, err := GrowLimit(c.size, p)
		if c.wantRefuse {
			if err == nil {
				t.Errorf("%d bytes, %v: limit %d, want a refusal", c.size, c.params, limit)
			}
			continue
		}
		if err != nil {
			t.Errorf("%d bytes, %v: %v", c.size, c.params, err)
			continue
		}
		opts, _ := MkfsOptions(c.size, p)
		bs, err := mkfs.Plan(c.size, opts)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := bs.Geometry(c.size)
		plain, _ := mkfs.Plan(c.size, mkfs.Options{})
		pg, _ := plain.Geometry(c.size)
		if g.Type != c.typ || g.ClusterSize != c.cluster || limit < c.minLimit || limit > c.maxLimit || g.FATBytes()-pg.FATBytes() > c.extraFAT {
			t.Errorf("%d bytes, %v: %s with %d-byte clusters, grows to %d, FAT %d bytes (mkfs.fat's %d); want %s, %d, %d..%d, at most %d more FAT",
				c.size, c.params, g.Type, g.ClusterSize, limit, g.FATBytes(), pg.FATBytes(), c.typ, c.cluster, c.minLimit, c.maxLimit, c.extraFAT)
		}
	}
	if _, err := volume.ParseParams(map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamMaxSize: "1Gi"}); err == nil {
		t.Error("maxSize on the usb pool was accepted")
	}
	if p, err := volume.ParseParams(map[string]string{volume.ParamMaxSize: "2Gi"}); err != nil || p.MaxSize != 2<<30 || p.Map()[volume.ParamMaxSize] != "2147483648" {
		t.Errorf("maxSize 2Gi: %+v, %v", p, err)
	}
}
