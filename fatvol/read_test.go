package fatvol_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// TestReadsBesideWriteback has readers share the volume while a writer rewrites a file under a
// small dirty bound, so batches are written and finish without the volume lock all the time. A
// read that starts after a write returned must see that write or a newer one: never the device's
// older bytes because the batch that held the newer ones finished while the read was under way.
func TestReadsBesideWriteback(t *testing.T) {
	img := makeImage(t, fat32)
	dev, err := blockdev.Open(img, false)
	if err != nil {
		t.Fatal(err)
	}
	// Reads linger after reading, so batches finish in the middle of them.
	v, err := fatvol.Open(lingeringReads{dev}, fatvol.Options{CacheBytes: 64 << 10, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close(); dev.Close() })
	const blocks, blockSize = 64, 4096
	f, err := v.Create("shared.bin")
	if err != nil {
		t.Fatal(err)
	}
	fill := func(gen uint8, b int) []byte {
		p := make([]byte, blockSize)
		for i := range p {
			p[i] = gen
		}
		p[0] = byte(b)
		return p
	}
	for b := 0; b < blocks; b++ {
		if _, err := f.WriteAt(fill(0, b), int64(b*blockSize)); err != nil {
			t.Fatal(err)
		}
	}
	gens := 60
	if testing.Short() {
		gens = 15
	}
	var written [blocks]atomic.Int32 // the newest generation whose write of the block returned
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd, err := v.OpenFile("shared.bin", os.O_RDONLY, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer rd.Close()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			got := make([]byte, blockSize)
			for {
				select {
				case <-stop:
					return
				default:
				}
				b := rng.IntN(blocks)
				least := written[b].Load()
				if _, err := rd.ReadAt(got, int64(b*blockSize)); err != nil && err != io.EOF {
					t.Errorf("read of block %d: %v", b, err)
					return
				}
				gen := got[1]
				if got[0] != byte(b) || int32(gen) < least {
					t.Errorf("block %d read as block %d of generation %d after generation %d was written", b, got[0], gen, least)
					return
				}
				for i := 2; i < blockSize; i++ {
					if got[i] != gen {
						t.Errorf("block %d mixes generations %d and %d", b, gen, got[i])
						return
					}
				}
			}
		}()
	}
	for g := 1; g <= gens && !t.Failed(); g++ {
		for b := 0; b < blocks; b++ {
			if _, err := f.WriteAt(fill(uint8(g), b), int64(b*blockSize)); err != nil {
				t.Fatal(err)
			}
			written[b].Store(int32(g))
		}
	}
	close(stop)
	wg.Wait()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	closeVolume(t, v)
	checkClean(t, img)
}

// lingeringReads is a device whose reads return a moment after they read.
type lingeringReads struct{ blockdev.Device }

func (d lingeringReads) ReadAt(p []byte, off int64) (int, error) {
	n, err := d.Device.ReadAt(p, off)
	time.Sleep(50 * time.Microsecond)
	return n, err
}

// BenchmarkRandomRead reads 4 KiB at random offsets of a 16 MiB file through File.ReadAt, the
// image in the host's page cache, so what is measured is the engine's own cost per read: with
// the file in one run of clusters, and fragmented into one run per cluster (two files written
// cluster by cluster in turn); serial and from parallel readers.
func BenchmarkRandomRead(b *testing.B) {
	const size = 16 << 20
	for _, layout := range []string{"contiguous", "fragmented"} {
		img := makeImage(b, volumeSpec{"FAT32-64MiB-512", 64 << 20, []string{"-F", "32", "-s", "1"}})
		v := openVolume(b, img)
		f, err := v.Create("data.bin")
		if err != nil {
			b.Fatal(err)
		}
		cs := clusterSize(b, v)
		var other *fatvol.File
		if layout == "fragmented" {
			if other, err = v.Create("other.bin"); err != nil {
				b.Fatal(err)
			}
		}
		chunk := make([]byte, cs)
		for off := 0; off < size; off += cs {
			if _, err := f.WriteAt(chunk, int64(off)); err != nil {
				b.Fatal(err)
			}
			if other != nil {
				if _, err := other.WriteAt(chunk, int64(off)); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := v.Sync(); err != nil {
			b.Fatal(err)
		}
		b.Run(layout, func(b *testing.B) {
			buf := make([]byte, 4096)
			r := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(4096)
			for b.Loop() {
				if _, err := f.ReadAt(buf, int64(r.IntN(size/4096))*4096); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(layout+"-parallel", func(b *testing.B) {
			b.SetBytes(4096)
			var seed atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 4096)
				r := rand.New(rand.NewPCG(seed.Add(1), 2))
				for pb.Next() {
					if _, err := f.ReadAt(buf, int64(r.IntN(size/4096))*4096); err != nil {
						b.Error(fmt.Errorf("read: %w", err))
						return
					}
				}
			})
		})
		f.Close()
		if other != nil {
			other.Close()
		}
		closeVolume(b, v)
	}
}
