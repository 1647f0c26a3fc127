package fatvol_test

import (
	"runtime"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol"
)

// TestCacheOffHeap writes 128 MiB through a 16 MiB cache: the Go heap must not hold the cache's
// pages (they are mapped outside it), so it grows by far less than the cache while the copy runs,
// and the data reads back.
func TestCacheOffHeap(t *testing.T) {
	img := makeImage(t, fat32Big)
	const bound = 16 << 20
	v := openVolumeWith(t, img, fatvol.Options{CacheBytes: bound})
	f, err := v.Create("big.bin")
	if err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	runtime.GC()
	base := heap()
	peak := base
	block := make([]byte, 1<<20)
	for i := range 128 {
		for j := range block {
			block[j] = byte(i + j)
		}
		if _, err := f.WriteAt(block, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			peak = max(peak, heap())
		}
	}
	if grew := peak - base; grew >= bound/2 {
		t.Errorf("the heap grew by %d bytes during the copy through a %d-byte cache: the pages are on it", grew, bound)
	}
	got := make([]byte, 1<<20)
	for _, i := range []int{0, 77, 127} {
		if _, err := f.ReadAt(got, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
		for j := range got {
			if got[j] != byte(i+j) {
				t.Fatalf("MiB %d byte %d: %d, want %d", i, j, got[j], byte(i+j))
			}
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	closeVolume(t, v)
	checkClean(t, img)
}
