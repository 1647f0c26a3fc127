package fatfuse

import (
	"errors"
	"os"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
)

// Stand-in for the takeover API until it lands.

type Connection struct {
	FD         int
	Mountpoint string
	State      *os.File
}

func ServeConnection(vol *fatvol.Volume, c Connection, opts mountopt.Options) (*Server, error) {
	return ServeFD(vol, c.FD, c.Mountpoint, opts)
}

func TakeOver(vol *fatvol.Volume, c Connection, opts mountopt.Options) (*Server, error) {
	return nil, errors.New("takeover is not implemented yet")
}

func (s *Server) Pause() error { return errors.New("pause is not implemented yet") }
