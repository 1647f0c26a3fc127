package fatfuse

import (
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
	// needs to take the connection over (state.go). nil: nothing kept, no takeover possible.
	State *os.File
}

// ServeConnection serves vol on a fresh connection: the server reads the kernel's INIT. The
// mount's options were the holder's to pass to mount(2); opts are still the server's, and a
// server taking the connection over must be given the same.
func ServeConnection(vol *fatvol.Volume, c Connection, opts mountopt.Options) (*Server, error) {
	s := newServer(vol, c.Mountpoint, opts)
	if c.State != nil {
		if err := c.State.Truncate(0); err != nil {
			return nil, fmt.Errorf("serve %s: state file: %w", c.Mountpoint, err)
		}
		s.state = &stateLog{f: c.State}
	}
	return s.serve(fmt.Sprintf("/dev/fd/%d", c.FD))
}
