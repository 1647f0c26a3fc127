package inprocess

import (
	"errors"
	"fmt"
	"time"

	"github.com/csi-fat/csi-fat/fatfuse"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/mounter"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// server is a volume this process serves: the engine open on its metered device, served
// through FUSE at the staging path.
type server struct {
	id   string
	dev  *mounter.MeteredDevice
	vol  *fatvol.Volume
	srv  *fatfuse.Server
	done chan struct{} // closed when the FUSE mount is gone
}

func (s *server) Done() <-chan struct{} { return s.done }

func (s *server) Unmount() error { return s.srv.Unmount() }

func (s *server) Close() error {
	if err := s.vol.Close(); err != nil {
		return fmt.Errorf("write back volume %s: %w", s.id, err)
	}
	return nil
}

func (s *server) Sync() error { return s.vol.Sync() }

func (s *server) Status(st *protocol.Status, stats, files bool) {
	serving := true
	select {
	case <-s.done:
		serving = false
	default:
	}
	mounter.FillStatus(st, s.vol, s.srv, s.dev, serving, stats, files)
}

func (s *server) Grow() (int64, bool, error) {
	n, grew, err := mounter.Grow(s.vol, s.dev.Counting.Device)
	if errors.Is(err, fatvol.ErrGrowLimit) {
		// As a mounter answers, so that the plugin judges both alike.
		err = &protocol.RemoteError{Msg: err.Error(), Code: protocol.CodeGrowLimit}
	}
	return n, grew, err
}

func (s *server) Hold(limit time.Duration) (func() (time.Duration, error), error) {
	h, err := mounter.HoldVolume(s.vol, limit)
	if err != nil {
		return nil, fmt.Errorf("hold volume %s: %w", s.id, err)
	}
	return h.Release, nil
}

func (s *server) Memory() *protocol.Memory { return &protocol.Memory{Nodes: int64(s.srv.Nodes())} }
