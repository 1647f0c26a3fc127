package imagepool

import (
	"testing"

	"github.com/csi-fat/csi-fat/node/volume"
)

// TestLargestImage: the capacity reported for a FAT type is a size CreateVolume can make, and a
// MiB more is not.
func TestLargestImage(t *testing.T) {
	for _, ft := range []int{12, 16, 32} {
		p := volume.Params{Pool: volume.PoolImage, Mode: volume.ModeDefault, FATType: ft}
		got := Largest(64<<30, p)
		if got <= 0 {
			t.Fatalf("FAT%d: largest image %d", ft, got)
		}
		if size, err := ChooseSize(got, got, p); err != nil || size != got {
			t.Errorf("FAT%d: largest image %d cannot be made: %d, %v", ft, got, size, err)
		}
		if got < 64<<30 {
			if _, err := ChooseSize(got+1<<20, got+1<<20, p); err == nil {
				t.Errorf("FAT%d: %d bytes is reported as the largest, but a MiB more can be made", ft, got)
			}
		}
	}
	if got := Largest(64<<30, volume.Params{Pool: volume.PoolImage, Mode: volume.ModeDefault}); got != 64<<30 {
		t.Errorf("auto type: largest image %d, want all of the 64 GiB", got)
	}
}
