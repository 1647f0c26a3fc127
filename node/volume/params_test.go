package volume

import (
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
)

func TestParseVolumeID(t *testing.T) {
	good := []string{"image:node-1:pvc-0b7c1a2e", "usb:worker.example.com:v_1.data"}
	for _, s := range good {
		id, err := ParseID(s)
		if err != nil || id.String() != s {
			t.Errorf("ParseID(%q) = %v, %v", s, id, err)
		}
	}
	bad := []string{"", "image", "image:n", "image:n:v:w", "disk:n:v", "image::v", "image:n:", "image:n:..",
		"image:n:.", "image:n:.hidden", "image:n:a/b", "image:n/x:v", "image:n:a\x00b", "image:n:a b",
		"image:n:" + strings.Repeat("a", MaxNameLength+1), "image:" + strings.Repeat("n", MaxNodeIDLength+1) + ":v"}
	for _, s := range bad {
		if _, err := ParseID(s); err == nil {
			t.Errorf("ParseID(%q) accepted", s)
		}
	}
	if _, err := ParseID("image:n:" + strings.Repeat("a", MaxNameLength)); err != nil {
		t.Errorf("a name of the maximum length: %v", err)
	}
}

func TestParseParams(t *testing.T) {
	tests := []struct {
		in   map[string]string
		want Params
		bad  bool
	}{
		{in: nil, want: Params{Pool: PoolImage, Mode: ModeDefault}},
		{in: map[string]string{"fatType": "auto", "csi.storage.k8s.io/pvc/name": "x"}, want: Params{Pool: PoolImage, Mode: ModeDefault}},
		{in: map[string]string{"fatType": "32", "clusterSize": "4K", "label": "data", "fats": "1", "mode": "sync"},
			want: Params{Pool: PoolImage, FATType: 32, ClusterSize: 4096, Label: "DATA", FATs: 1, Mode: ModeSync}},
		{in: map[string]string{"pool": "usb"}, want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep}},
		{in: map[string]string{"pool": "usb", "adopt": "true", "reclaim": "wipe"}, want: Params{Pool: PoolUSB, Mode: ModeDefault, Adopt: true, Reclaim: ReclaimWipe}},
		{in: map[string]string{"clusterSize": "65536"}, want: Params{Pool: PoolImage, Mode: ModeDefault, ClusterSize: 65536}},
		{in: map[string]string{"pool": "nfs"}, bad: true},
		{in: map[string]string{"fatType": "8"}, bad: true},
		{in: map[string]string{"clusterSize": "128K"}, bad: true},
		{in: map[string]string{"clusterSize": "256"}, bad: true},
		{in: map[string]string{"clusterSize": "x"}, bad: true},
		{in: map[string]string{"fats": "5"}, bad: true},
		{in: map[string]string{"label": "TWELVE CHARS"}, bad: true},
		{in: map[string]string{"mode": "writeback"}, bad: true},
		{in: map[string]string{"adopt": "maybe", "pool": "usb"}, bad: true},
		{in: map[string]string{"reclaim": "keep"}, bad: true},
		{in: map[string]string{"pool": "usb", "adopt": "true", "fatType": "32"}, bad: true},
		{in: map[string]string{"Pool": "image"}, bad: true},
		{in: map[string]string{"onDamage": "repair"}, want: Params{Pool: PoolImage, Mode: ModeDefault}},
		{in: map[string]string{"onDamage": "readonly"}, want: Params{Pool: PoolImage, Mode: ModeDefault, OnDamage: OnDamageReadOnly}},
		{in: map[string]string{"onDamage": "fail", "pool": "usb", "adopt": "true"},
			want: Params{Pool: PoolUSB, Mode: ModeDefault, Adopt: true, Reclaim: ReclaimKeep, OnDamage: OnDamageFail}},
		{in: map[string]string{"codepage": "850"}, want: Params{Pool: PoolImage, Mode: ModeDefault, CodePage: 850}},
		{in: map[string]string{"codepage": "437"}, want: Params{Pool: PoolImage, Mode: ModeDefault}},
		{in: map[string]string{"codepage": "932"}, bad: true},
		{in: map[string]string{"cacheSize": "256Mi"}, want: Params{Pool: PoolImage, Mode: ModeDefault, CacheBytes: 256 << 20}},
		{in: map[string]string{"cacheSize": "1Mi"}, bad: true},
		{in: map[string]string{"cacheSize": "17Gi"}, bad: true},
		{in: map[string]string{"cacheSize": "lots"}, bad: true},
		{in: map[string]string{"pool": "usb", "layout": "mbr"}, want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep, Layout: LayoutMBR}},
		{in: map[string]string{"pool": "usb", "layout": "superfloppy"}, want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep}},
		{in: map[string]string{"pool": "usb", "layout": "gpt"}, bad: true},
		{in: map[string]string{"pool": "usb", "wipe": "true"}, want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep, Wipe: true}},
		{in: map[string]string{"wipe": "true"}, bad: true},
		{in: map[string]string{"pool": "usb", "vendor": "Fake*", "serial": "CAM0?"},
			want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep, Selection: Selection{Vendor: "Fake*", Serial: "CAM0?"}}},
		{in: map[string]string{"pool": "usb", "adopt": "true", "fsLabel": "CAM01"},
			want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep, Adopt: true, Selection: Selection{FSLabel: "CAM01"}}},
		{in: map[string]string{"pool": "usb", "fsLabel": "CAM01"}, bad: true},
		{in: map[string]string{"vendor": "Fake"}, bad: true},
		{in: map[string]string{"pool": "media", "byId": "usb-SanDisk_*", "byPath": "*-usb-0:2:*"},
			want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep, Selection: Selection{ByID: "usb-SanDisk_*", ByPath: "*-usb-0:2:*"}}},
		{in: map[string]string{"byPath": "*-usb-0:2:*"}, bad: true},
		{in: map[string]string{"pool": "media", "byId": "[x"}, bad: true},
		{in: map[string]string{"pool": "removable"}, bad: true},
		{in: map[string]string{"pool": "usb", "model": "[x"}, bad: true},
		{in: map[string]string{"pool": "usb", "serial": ""}, bad: true},
		{in: map[string]string{"pool": "usb", "adopt": "true", "wipe": "true"}, bad: true},
		{in: map[string]string{"layout": "mbr"}, bad: true},
		{in: map[string]string{"pool": "usb", "adopt": "true", "layout": "mbr"}, bad: true},
		{in: map[string]string{"codepage": "utf8"}, bad: true},
		{in: map[string]string{"onDamage": "ro"}, bad: true},
		{in: map[string]string{"onDamage": ""}, bad: true},
		{in: map[string]string{"pool": "media", "adopt": "true", "partition": "02"},
			want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep, Adopt: true, Selection: Selection{Partition: "2"}}},
		{in: map[string]string{"pool": "media", "adopt": "true", "partition": "0fc63daf-8483-4772-8e79-3d69d8477de4"},
			want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep, Adopt: true, Selection: Selection{Partition: "0FC63DAF-8483-4772-8E79-3D69D8477DE4"}}},
		{in: map[string]string{"pool": "media", "adopt": "true", "partition": "LOG*"},
			want: Params{Pool: PoolUSB, Mode: ModeDefault, Reclaim: ReclaimKeep, Adopt: true, Selection: Selection{Partition: "LOG*"}}},
		{in: map[string]string{"pool": "media", "adopt": "true", "partition": ""}, bad: true},
		{in: map[string]string{"pool": "media", "adopt": "true", "partition": "0"}, bad: true},
		{in: map[string]string{"pool": "media", "adopt": "true", "partition": "99999"}, bad: true},
		{in: map[string]string{"pool": "media", "adopt": "true", "partition": "0fc63daf-8483-4772-8e79-3d69d8477dxx"}, bad: true},
		{in: map[string]string{"pool": "media", "adopt": "true", "partition": "[x"}, bad: true},
		{in: map[string]string{"pool": "media", "partition": "1"}, bad: true},
		{in: map[string]string{"partition": "1"}, bad: true},
	}
	for _, tt := range tests {
		got, err := ParseParams(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("ParseParams(%v) = %+v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseParams(%v) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		// The volume context round-trips to the same parameters.
		if again, err := ParseParams(got.Map()); err != nil || again != got {
			t.Errorf("ParseParams(%v.Map()) = %+v, %v", got, again, err)
		}
	}
}

// TestDefaultCacheIsEngines: the mounter pods' memory limits count the engine's own default.
func TestDefaultCacheIsEngines(t *testing.T) {
	if DefaultCacheBytes != fatvol.DefaultCacheBytes {
		t.Fatalf("volume.DefaultCacheBytes = %d, the engine's default is %d", DefaultCacheBytes, fatvol.DefaultCacheBytes)
	}
}
