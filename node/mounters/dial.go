package mounters

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

func dial(socket string, timeout time.Duration) (*net.UnixConn, error) {
	d := net.Dialer{Timeout: timeout}
	addr := socket
	if len(addr) > unixPathMax {
		// A pod's socket under a long kubelet directory: reach it through a descriptor of its
		// directory, whose /proc/self/fd path is short.
		dir, err := os.OpenFile(filepath.Dir(socket), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil, fmt.Errorf("connect to mounter at %s: %w", socket, err)
		}
		defer dir.Close()
		addr = fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(socket))
	}
	c, err := d.Dial("unixpacket", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to mounter at %s: %w", socket, err)
	}
	return c.(*net.UnixConn), nil
}

// unixPathMax is the longest path a unix socket address holds.
const unixPathMax = 107
