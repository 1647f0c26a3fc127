package blockdev

import (
	"bytes"
	"testing"
)

// The recorder logs writes (a vectored one as one request) and successful flushes in order, and
// the writes still reach the device.
func TestRecorderLogsRequests(t *testing.T) {
	img := newImage(t, 1<<20)
	r := NewRecorder(img)
	a, b, c := bytes.Repeat([]byte{1}, 512), bytes.Repeat([]byte{2}, 1024), bytes.Repeat([]byte{3}, 512)
	if _, err := r.WriteAt(a, 4096); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WritevAt([][]byte{b, c}, 8192); err != nil {
		t.Fatal(err)
	}
	a[0] = 9 // the log keeps its own copy
	ops := r.Ops()
	if len(ops) != 3 || r.Len() != 3 {
		t.Fatalf("logged %d ops (Len %d), want 3", len(ops), r.Len())
	}
	if ops[0].Flush || ops[0].Off != 4096 || !bytes.Equal(ops[0].Data, bytes.Repeat([]byte{1}, 512)) {
		t.Errorf("op 0 = flush %v at %d, %d bytes", ops[0].Flush, ops[0].Off, len(ops[0].Data))
	}
	if !ops[1].Flush {
		t.Errorf("op 1 is not the flush")
	}
	if ops[2].Flush || ops[2].Off != 8192 || !bytes.Equal(ops[2].Data, append(b, c...)) {
		t.Errorf("op 2 = flush %v at %d, %d bytes; want the vectored write as one", ops[2].Flush, ops[2].Off, len(ops[2].Data))
	}
	got := make([]byte, 1536)
	if _, err := img.ReadAt(got, 8192); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, append(b, c...)) {
		t.Error("the vectored write did not reach the device")
	}
}

// A flush that fails made nothing durable and is not logged.
func TestRecorderSkipsFailedFlush(t *testing.T) {
	f := NewFaulty(newImage(t, 1<<20))
	r := NewRecorder(f)
	f.FailFlush(true)
	if err := r.Flush(); err == nil {
		t.Fatal("flush did not fail")
	}
	if r.Len() != 0 {
		t.Fatalf("failed flush logged: %d ops", r.Len())
	}
}
