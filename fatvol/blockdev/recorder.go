package blockdev

import "sync"

// Recorder wraps a Device and logs every write and flush that reaches it, in order, with a copy
// of the bytes written, so that a test can rebuild what the medium would hold after a power cut
// at any point: everything up to the last flush, and any part of what came after it.
// Safe for concurrent use.
type Recorder struct {
	Device
	mu  sync.Mutex
	ops []RecordedOp
}

// RecordedOp is one request: a write of Data at Off, or a flush.
type RecordedOp struct {
	Flush bool
	Off   int64
	Data  []byte
}

var _ Device = (*Recorder)(nil)

// NewRecorder wraps d with an empty log.
func NewRecorder(d Device) *Recorder { return &Recorder{Device: d} }

// WriteAt logs the write, then performs it. A failed write is logged too: a medium may hold any
// part of a request that failed.
func (r *Recorder) WriteAt(p []byte, off int64) (int, error) {
	r.record(RecordedOp{Off: off, Data: append([]byte(nil), p...)})
	return r.Device.WriteAt(p, off)
}

// WritevAt logs the request as one write of the buffers back to back, then performs it.
func (r *Recorder) WritevAt(bufs [][]byte, off int64) (int, error) {
	var data []byte
	for _, b := range bufs {
		data = append(data, b...)
	}
	r.record(RecordedOp{Off: off, Data: data})
	return r.Device.WritevAt(bufs, off)
}

// Flush performs the flush and logs it once it succeeded: only then is what came before durable.
func (r *Recorder) Flush() error {
	if err := r.Device.Flush(); err != nil {
		return err
	}
	r.record(RecordedOp{Flush: true})
	return nil
}

func (r *Recorder) record(op RecordedOp) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Len is the number of requests logged so far: a position in the log.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Ops returns the log so far. The requests' bytes are shared, not copied: do not change them.
func (r *Recorder) Ops() []RecordedOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RecordedOp(nil), r.ops...)
}
