package mounter

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// grow grows the served volume to its device's size now: the plugin grew the image through
// its own descriptor, so the mounter reads the size again and grows the file system in place.
func (s *Server) grow() *protocol.Response {
	s.mu.Lock()
	vol, dev, done := s.vol, s.dev, s.done
	s.mu.Unlock()
	if vol == nil || closed(done) {
		return fail(errors.New("no volume is served"), protocol.CodeInvalid)
	}
	n, grew, err := Grow(vol, dev.Counting.Device)
	switch {
	case errors.Is(err, fatvol.ErrGrowLimit):
		return fail(err, protocol.CodeGrowLimit)
	case errors.Is(err, syscall.EROFS):
		return fail(fmt.Errorf("the volume is served read-only: %w", err), protocol.CodeReadOnly)
	case err != nil:
		return fail(err, "")
	}
	return &protocol.Response{Grow: &protocol.GrowResult{Bytes: n, Grew: grew}}
}

// Grow reads the size of the image file (or device) under vol again and grows the file system
// to it, returning its size in bytes and whether it grew; the plugin's in-process server calls
// it too.
func Grow(vol *fatvol.Volume, dev blockdev.Device) (int64, bool, error) {
	f, ok := dev.(*blockdev.File)
	if !ok {
		return 0, false, fmt.Errorf("the volume's device is a %T, not an image file or device", dev)
	}
	if _, err := f.UpdateSize(); err != nil {
		return 0, false, err
	}
	before := vol.Geometry().TotalSectors
	n, err := vol.Grow()
	return n, err == nil && vol.Geometry().TotalSectors != before, err
}
