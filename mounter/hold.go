package mounter

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// Holding is a volume written back and held (fatvol.Volume.Hold) until Release, or until its
// limit passes: a plugin that dies or hangs while a volume is held never holds it for longer.
type Holding struct {
	start   time.Time
	release chan struct{}
	once    sync.Once
	ended   chan struct{}
}

// HoldVolume writes vol back (letting operations go on), then holds it: it returns once nothing
// can reach the volume until Release or until limit has passed.
func HoldVolume(vol *fatvol.Volume, limit time.Duration) (*Holding, error) {
	// Most of what is dirty goes out before anything is held, so the hold's own write-back is short.
	if err := vol.Sync(); err != nil {
		return nil, fmt.Errorf("write back: %w", err)
	}
	h := &Holding{release: make(chan struct{}), ended: make(chan struct{})}
	inPlace := make(chan error, 1)
	go func() {
		defer close(h.ended)
		err := vol.Hold(func() error {
			h.start = time.Now()
			inPlace <- nil
			<-h.release
			return nil
		})
		if err != nil {
			inPlace <- fmt.Errorf("write back: %w", err)
		}
	}()
	if err := <-inPlace; err != nil {
		return nil, err
	}
	time.AfterFunc(limit, func() {
		h.once.Do(func() { close(h.release) })
	})
	return h, nil
}

// ErrHoldExpired is what Release answers when the limit ended the hold first: whatever was
// copied meanwhile may not be the volume of one moment.
var ErrHoldExpired = errors.New("the hold's limit passed before it was released")

// Release ends the hold and tells how long it lasted; ErrHoldExpired if its limit ended it first.
func (h *Holding) Release() (time.Duration, error) {
	released := false
	h.once.Do(func() {
		released = true
		close(h.release)
	})
	<-h.ended
	held := time.Since(h.start)
	if !released {
		return held, ErrHoldExpired
	}
	return held, nil
}

// hold answers OpHold on c, then waits on the same connection for OpRelease, at most until the
// hold's limit: the hold ends at the release, at the connection's end or error, or at the limit,
// and every way but the release closes the connection unanswered, so the plugin knows its copy
// is void.
func (s *Server) hold(c *net.UnixConn, req *protocol.Request) {
	s.mu.Lock()
	vol, done := s.vol, s.done
	s.mu.Unlock()
	if vol == nil || closed(done) {
		protocol.Send(c, &protocol.Response{Version: protocol.Version, Error: "no volume is served", Code: protocol.CodeInvalid})
		return
	}
	h, err := HoldVolume(vol, req.Hold.Limit)
	if err != nil {
		protocol.Send(c, &protocol.Response{Version: protocol.Version, Error: err.Error()})
		return
	}
	s.log.Info("holding the volume", "volume", req.Volume, "limit", req.Hold.Limit)
	if err := protocol.Send(c, &protocol.Response{Version: protocol.Version}); err != nil {
		h.Release()
		s.log.Warn("answering hold; released", "volume", req.Volume, "error", err)
		return
	}
	var next protocol.Request
	files, err := protocol.Receive(c, &next, h.start.Add(req.Hold.Limit))
	for _, f := range files {
		f.Close()
	}
	if err == nil {
		err = protocol.CheckRequest(&next, len(files))
	}
	if err == nil && next.Op != protocol.OpRelease {
		err = fmt.Errorf("operation %s while the volume is held; only release may follow hold", next.Op)
	}
	held, rerr := h.Release()
	if err != nil || rerr != nil {
		why := errors.Join(err, rerr)
		s.log.Warn("hold ended without its release", "volume", req.Volume, "held", held, "why", why)
		return
	}
	s.log.Info("released the volume", "volume", req.Volume, "held", held)
	protocol.Send(c, &protocol.Response{Version: protocol.Version, Hold: &protocol.HoldResult{Held: held}})
}
