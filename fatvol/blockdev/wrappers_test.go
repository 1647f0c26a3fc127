package blockdev

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestCountingCounts(t *testing.T) {
	c := NewCounting(newImage(t, 1<<20))
	if _, err := c.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	// A WritevAt of 3 buffers is ONE request with the summed bytes.
	if _, err := c.WritevAt([][]byte{make([]byte, 4096), make([]byte, 4096), make([]byte, 4096)}, 8192); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadAt(make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadAt(make([]byte, 1000), 1<<20-100); err == nil {
		t.Fatal("straddling read: want io.EOF")
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	if s.Writes != 2 || s.BytesWritten != 4*4096 || s.Reads != 2 || s.BytesRead != 512+100 || s.Flushes != 1 {
		t.Fatalf("stats %+v", s)
	}
	if s.WriteSizes[BucketOf(4096)] != 1 || s.WriteSizes[BucketOf(3*4096)] != 1 {
		t.Fatalf("write histogram %v", s.WriteSizes)
	}
	if s.ReadSizes[BucketOf(512)] != 1 || s.ReadSizes[BucketOf(1000)] != 1 || BucketOf(1000) != BucketOf(1024) {
		t.Fatalf("read histogram %v", s.ReadSizes)
	}
	if s.AvgWriteSize() != 8192 {
		t.Fatalf("AvgWriteSize %v", s.AvgWriteSize())
	}
	str := s.String()
	for _, want := range []string{"writes 2", "flushes 1", "16.0K", "4.0K", "size<="} {
		if !strings.Contains(str, want) {
			t.Errorf("String() lacks %q:\n%s", want, str)
		}
	}
	t.Logf("\n%s", str)

	before := c.Stats()
	c.WriteAt(make([]byte, 512), 0)
	if d := c.Stats().Sub(before); d.Writes != 1 || d.BytesWritten != 512 || d.Reads != 0 {
		t.Fatalf("Sub %+v", d)
	}
	c.Reset()
	if c.Stats() != (Stats{}) {
		t.Fatalf("Reset left %+v", c.Stats())
	}
	if (Stats{}).AvgWriteSize() != 0 || (Stats{}).String() == "" {
		t.Fatal("empty stats")
	}
}

func TestBuckets(t *testing.T) {
	for _, c := range []struct{ size, bucket int }{
		{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 3}, {5, 4}, {512, 10}, {513, 11}, {4096, 13}, {1 << 40, NumBuckets - 1},
	} {
		if got := BucketOf(c.size); got != c.bucket {
			t.Errorf("BucketOf(%d) = %d, want %d", c.size, got, c.bucket)
		}
		if c.size > 0 && c.bucket < NumBuckets-1 && (int64(c.size) > BucketLimit(c.bucket) || int64(c.size) <= BucketLimit(c.bucket-1)) {
			t.Errorf("size %d outside bucket %d range", c.size, c.bucket)
		}
	}
}

func TestCountingConcurrent(t *testing.T) {
	c := NewCounting(newImage(t, 1<<20))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			buf := make([]byte, 512)
			for i := 0; i < 100; i++ {
				off := int64((g*100 + i) * 512)
				c.WriteAt(buf, off)
				c.WritevAt([][]byte{buf}, off)
				c.ReadAt(buf, off)
				_ = c.Stats()
			}
		}(g)
	}
	wg.Wait()
	if s := c.Stats(); s.Writes != 1600 || s.Reads != 800 || s.BytesWritten != 1600*512 {
		t.Fatalf("concurrent stats %+v", s)
	}
}

func TestFaultyFailWritesAfter(t *testing.T) {
	img := newImage(t, 1<<20)
	f := NewFaulty(img)
	f.FailWritesAfter(2)
	for i := 0; i < 2; i++ {
		if _, err := f.WriteAt([]byte{1}, int64(i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for i := 2; i < 4; i++ {
		if _, err := f.WritevAt([][]byte{{9}}, int64(i)); !errors.Is(err, syscall.EIO) {
			t.Fatalf("write %d: %v, want EIO", i, err)
		}
	}
	got := make([]byte, 4)
	if _, err := f.ReadAt(got, 0); err != nil || string(got) != "\x01\x01\x00\x00" {
		t.Fatalf("read %q, %v: failed writes must not land", got, err)
	}
	if err := f.Flush(); err != nil {
		t.Fatalf("flush after write fault: %v", err)
	}
	if f.Dropped() != 2 {
		t.Fatalf("Dropped %d", f.Dropped())
	}
	f.Disarm()
	if _, err := f.WriteAt([]byte{1}, 0); err != nil {
		t.Fatal(err)
	}
}

func TestFaultyStopAfterWrites(t *testing.T) {
	img := newImage(t, 1<<20)
	f := NewFaulty(img)
	f.StopAfterWrites(1)
	if _, err := f.WriteAt([]byte("A"), 0); err != nil {
		t.Fatal(err)
	}
	if f.Stopped() {
		t.Fatal("stopped too early")
	}
	if _, err := f.WriteAt([]byte("B"), 1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after stop: %v", err)
	}
	if _, err := f.WritevAt([][]byte{[]byte("C"), []byte("D")}, 2); !errors.Is(err, syscall.EIO) {
		t.Fatalf("writev after stop: %v", err)
	}
	if !f.Stopped() {
		t.Fatal("not stopped")
	}
	if err := f.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("flush after stop: %v", err)
	}
	// The dropped writes never reached the image.
	got := make([]byte, 4)
	if _, err := img.ReadAt(got, 0); err != nil || string(got) != "A\x00\x00\x00" {
		t.Fatalf("image holds %q, %v", got, err)
	}
	f.Disarm()
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestFaultyReadsAndFlush(t *testing.T) {
	f := NewFaulty(newImage(t, 4096))
	f.FailReads(true)
	if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read: %v", err)
	}
	f.FailReads(false)
	if _, err := f.ReadAt(make([]byte, 1), 0); err != nil {
		t.Fatal(err)
	}
	f.FailFlush(true)
	if err := f.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("flush: %v", err)
	}
	if _, err := f.WriteAt([]byte{1}, 0); err != nil {
		t.Fatalf("FailFlush must not affect writes: %v", err)
	}
	f.Disarm()
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestFaultyConcurrentBudget(t *testing.T) {
	f := NewFaulty(newImage(t, 1<<20))
	f.FailWritesAfter(50)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, err := f.WriteAt(make([]byte, 512), 0); err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if ok != 50 || f.Dropped() != 150 {
		t.Fatalf("ok %d dropped %d; want exactly 50 and 150", ok, f.Dropped())
	}
}
