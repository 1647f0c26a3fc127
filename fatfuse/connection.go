package fatfuse

import (
	"errors"
	"fmt"
	"os"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
)

// Connection is a FUSE connection someone else mounted and holds.
type Connection struct {
	// FD is its /dev/fuse descriptor; the server owns this number and closes it when it ends.
	FD int
	// Mountpoint is where it is mounted, for logs.
	Mountpoint string
	// State is empty (a fresh connection) or written by a previous server (takeover); normally a
	// memfd made and kept by the holder. The server keeps in it, at all times, what another server
	// needs to take the connection over. nil: nothing kept, no takeover possible.
	State *os.File
}

// ServeConnection serves vol on a fresh connection: the server reads the kernel's INIT.
func ServeConnection(vol *fatvol.Volume, c Connection, opts mountopt.Options) (*Server, error) {
	return serve(vol, fmt.Sprintf("/dev/fd/%d", c.FD), c.Mountpoint, opts)
}

// ErrNoTakeover: the server cannot take the connection over.
var ErrNoTakeover = errors.New("takeover not possible")

// TakeOver serves vol on a live connection whose previous server ended, from the identities and
// settings that server kept in c.State.
func TakeOver(vol *fatvol.Volume, c Connection, opts mountopt.Options) (*Server, error) {
	return nil, fmt.Errorf("take over %s: %w", c.Mountpoint, ErrNoTakeover)
}

// Pause hands the connection over: no request starts after it, those in progress finish, the
// volume is written back and the state is left complete. Wait returns afterwards; the connection
// stays alive for the next server.
func (s *Server) Pause() error {
	return fmt.Errorf("pause %s: %w", s.mountpoint, ErrNoTakeover)
}
