package volume

import (
	"strings"
	"testing"
)

func TestParseEphemeral(t *testing.T) {
	good := []struct {
		attrs map[string]string
		size  int64
		fat   int
	}{
		{map[string]string{}, 0, 0},
		{map[string]string{"size": "67108864"}, 64 << 20, 0},
		{map[string]string{"size": "64Mi", "fatType": "16"}, 64 << 20, 16},
		{map[string]string{"size": "1Gi", EphemeralContextKey: "true", "csi.storage.k8s.io/pod.name": "p"}, 1 << 30, 0},
		{map[string]string{"size": "100M"}, 100e6, 0},
		{map[string]string{"size": "1Ti"}, 1 << 40, 0},
	}
	for _, g := range good {
		size, p, err := ParseEphemeral(g.attrs)
		if err != nil || size != g.size || p.FATType != g.fat || p.Pool != PoolImage {
			t.Errorf("ParseEphemeral(%v) = %d, %+v, %v; want %d bytes, FAT%d", g.attrs, size, p, err, g.size, g.fat)
		}
	}
	for _, bad := range []map[string]string{
		{"size": ""}, {"size": "0"}, {"size": "-5Mi"}, {"size": "1.5Gi"}, {"size": "64MiB"}, {"size": "2Ti"},
		{"size": "99999999999999999999"}, {"pool": "usb"}, {"sizes": "1Gi"}, {"reclaim": "wipe"}, {"maxSize": "1Gi"},
	} {
		if _, _, err := ParseEphemeral(bad); err == nil {
			t.Errorf("ParseEphemeral(%v) takes it", bad)
		}
	}
}

// TestEphemeralName: the name of an inline volume is a safe path element whatever the CO's ID
// holds, and different IDs get different names.
func TestEphemeralName(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"csi-abc", "../../etc/passwd", "a/b", "x\x00y", strings.Repeat("z", 1000), ""} {
		name := EphemeralName(id)
		if err := ValidateName(name); err != nil {
			t.Errorf("EphemeralName(%q) = %q: %v", id, name, err)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%q and %q share the name %s", id, other, name)
		}
		seen[name] = id
	}
}
