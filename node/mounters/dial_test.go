package mounters

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDialLongSocketPath: a mounter pod's socket lies deeper under the kubelet's directory than
// a unix socket address can name; the plugin reaches it all the same.
func TestDialLongSocketPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "control.sock")
	if len(socket) <= unixPathMax {
		t.Fatalf("path %s is short enough to bind directly", socket)
	}
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: fmt.Sprintf("/proc/self/fd/%d/control.sock", d.Fd()), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.AcceptUnix()
		if err == nil {
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	c, err := dial(socket, CallTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if _, err := dial(filepath.Join(dir, "missing.sock"), CallTimeout); err == nil {
		t.Error("dialled a socket that does not exist")
	}
}
