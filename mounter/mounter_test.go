package mounter

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// start runs a mounter in this process on a socket in a temporary directory.
func start(t *testing.T) (socket string, s *Server) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "m.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	s = NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.quit()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return socket, s
}

func dial(t *testing.T, socket string) *net.UnixConn {
	t.Helper()
	c, err := net.Dial("unixpacket", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.UnixConn)
}

// image makes a formatted image file, opened as the plugin would hand it over.
func image(t *testing.T) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "v.img")
	dev, err := blockdev.CreateImage(path, 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mkfs.Format(dev, mkfs.Options{}); err != nil {
		t.Fatal(err)
	}
	dev.Close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestCheckOverTheSocket(t *testing.T) {
	socket, _ := start(t)
	f := image(t)
	resp, err := protocol.Call(dial(t, socket), &protocol.Request{Op: protocol.OpCheck, Volume: "v", Check: &protocol.CheckArgs{Repair: true, Walk: true}},
		10*time.Second, int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Check.Clean {
		t.Fatalf("fresh image not clean: %+v", resp.Check)
	}
	// Not a FAT file system: a clear error, classified.
	junk, _ := os.CreateTemp(t.TempDir(), "junk")
	junk.Write(make([]byte, 1<<20))
	defer junk.Close()
	_, err = protocol.Call(dial(t, socket), &protocol.Request{Op: protocol.OpCheck, Volume: "v", Check: &protocol.CheckArgs{}}, 10*time.Second, int(junk.Fd()))
	var re *protocol.RemoteError
	if err == nil || !asRemote(err, &re) || re.Code != protocol.CodeNotFAT {
		t.Fatalf("check of zeros = %v", err)
	}
	// Status before serving: alive, serving nothing.
	resp, err = protocol.Call(dial(t, socket), &protocol.Request{Op: protocol.OpStatus}, 5*time.Second)
	if err != nil || resp.Status == nil || resp.Status.Serving || resp.Status.PID != os.Getpid() {
		t.Fatalf("status = %+v, %v", resp, err)
	}
}

func asRemote(err error, re **protocol.RemoteError) bool {
	r, ok := err.(*protocol.RemoteError)
	*re = r
	return ok
}

// TestHostileRequests: the mounter answers every malformed request with an error and goes on
// serving other connections; none makes it hang or panic.
func TestHostileRequests(t *testing.T) {
	socket, _ := start(t)
	f := image(t)
	fd := int(f.Fd())
	raw := func(data string, fds ...int) string {
		c := dial(t, socket)
		var oob []byte
		if len(fds) > 0 {
			oob = unixRights(fds...)
		}
		if _, _, err := c.WriteMsgUnix([]byte(data), oob, nil); err != nil {
			t.Fatal(err)
		}
		var resp protocol.Response
		if _, err := protocol.Receive(c, &resp, time.Now().Add(10*time.Second)); err != nil {
			t.Fatalf("%q: no answer: %v", data, err)
		}
		return resp.Error
	}
	for _, tt := range []struct {
		data string
		fds  []int
		want string
	}{
		{`{"version":9,"op":"status"}`, nil, "version 9"},
		{`not json at all`, nil, "malformed"},
		{`{"version":1,"op":"serve","serve":{"options":"","source":"x","mountpoint":"/x"}}`, []int{fd}, "takes 2 descriptors"},
		{`{"version":1,"op":"check","check":{}}`, nil, "takes 1 descriptors"},
		{`{"version":1,"op":"check"}`, []int{fd}, "without its arguments"},
		{`{"version":1,"op":"status"}`, []int{fd, fd}, "takes 0 descriptors"},
		{`{"version":1,"op":"rm -rf /"}`, nil, "unknown operation"},
		{`{"version":1,"op":"serve","serve":{"options":"evil=1","source":"x","mountpoint":"/x"}}`, []int{fd, fd}, "unknown mount option"},
		{`{"version":1,"op":"sync"}`, nil, "no volume is served"},
		{`{"version":1,"op":"grow"}`, nil, "no volume is served"},
		{`{"version":1,"op":"grow"}`, []int{fd}, "takes 0 descriptors"},
		{strings.Repeat("[", protocol.MaxMessage+10), nil, "longer than"},
		{`{"version":1,"op":"serve","serve":{"options":"","source":"x","mountpoint":"/x","resume":true}}`, []int{fd, fd}, "without its state descriptor"},
		{`{"version":1,"op":"serve","serve":{"options":"","source":"x","mountpoint":"/x","state":true}}`, []int{fd, fd}, "takes 3 descriptors"},
		{`{"version":1,"op":"descriptors"}`, nil, "no volume is served"},
		{`{"version":1,"op":"hand-over"}`, nil, "no volume is served"},
	} {
		if got := raw(tt.data, tt.fds...); !strings.Contains(got, tt.want) {
			t.Errorf("%.60q: answered %q, want %q", tt.data, got, tt.want)
		}
	}
	// Its version, for a plugin of another to hand its volume over.
	if resp, err := protocol.Call(dial(t, socket), &protocol.Request{Op: protocol.OpBuild}, 5*time.Second); err != nil || resp.Build != Version {
		t.Fatalf("build = %+v, %v; want %q", resp, err, Version)
	}
	// A connection that sends nothing does not hold the mounter up.
	silent := dial(t, socket)
	_ = silent
	if _, err := protocol.Call(dial(t, socket), &protocol.Request{Op: protocol.OpStatus}, 5*time.Second); err != nil {
		t.Fatalf("status after hostile requests: %v", err)
	}
}

func unixRights(fds ...int) []byte { return unix.UnixRights(fds...) }
