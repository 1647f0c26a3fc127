package mounter

import (
	"strings"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// serving gives the mounter a volume to hold, as serve would (without FUSE).
func serving(t *testing.T, s *Server) *fatvol.Volume {
	t.Helper()
	dev, err := blockdev.FromFile(image(t), "v.img", blockdev.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	vol, err := fatvol.Open(dev, fatvol.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	s.mu.Lock()
	s.vol, s.done = vol, make(chan struct{})
	s.mu.Unlock()
	return vol
}

// writeFile writes a file on vol and tells when it returned.
func writeFile(vol *fatvol.Volume, name string) <-chan time.Time {
	done := make(chan time.Time, 1)
	go func() {
		f, err := vol.Create(name)
		if err == nil {
			_, err = f.Write([]byte("written while held"))
			f.Close()
		}
		if err != nil {
			panic(err)
		}
		done <- time.Now()
	}()
	return done
}

// TestHold: a held volume takes no operation until its release, which answers how long it held;
// the hold ends by itself at its limit (a release then finds the connection closed, so the copy
// is known void) and at once when the connection ends (the plugin died); requests that do not
// fit the hold are refused.
func TestHold(t *testing.T) {
	socket, s := start(t)
	// Nothing served: nothing to hold.
	if _, err := protocol.Call(dial(t, socket), &protocol.Request{Op: protocol.OpHold, Hold: &protocol.HoldArgs{Limit: time.Second}}, 5*time.Second); err == nil || !strings.Contains(err.Error(), "no volume is served") {
		t.Fatalf("hold with no volume = %v", err)
	}
	vol := serving(t, s)

	// Released: the write waits for the release.
	c := dial(t, socket)
	if _, err := protocol.Call(c, &protocol.Request{Op: protocol.OpHold, Volume: "v", Hold: &protocol.HoldArgs{Limit: time.Minute}}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	wrote := writeFile(vol, "A.TXT")
	time.Sleep(300 * time.Millisecond)
	select {
	case <-wrote:
		t.Fatal("a write went through while the volume was held")
	default:
	}
	released := time.Now()
	resp, err := protocol.Call(c, &protocol.Request{Op: protocol.OpRelease, Volume: "v"}, 10*time.Second)
	if err != nil || resp.Hold == nil || resp.Hold.Held < 300*time.Millisecond {
		t.Fatalf("release = %+v, %v; want the hold's length, at least 300ms", resp, err)
	}
	if at := <-wrote; at.Before(released) {
		t.Fatal("the write returned before the release")
	}

	// Limit: the hold ends by itself; the late release finds the connection closed.
	c = dial(t, socket)
	start := time.Now()
	if _, err := protocol.Call(c, &protocol.Request{Op: protocol.OpHold, Volume: "v", Hold: &protocol.HoldArgs{Limit: 500 * time.Millisecond}}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	at := <-writeFile(vol, "B.TXT")
	if d := at.Sub(start); d < 400*time.Millisecond || d > 5*time.Second {
		t.Errorf("a write under a hold of 500ms returned after %v", d)
	}
	if _, err := protocol.Call(c, &protocol.Request{Op: protocol.OpRelease, Volume: "v"}, 5*time.Second); err == nil {
		t.Error("a release after the hold's limit succeeded; the copy would be taken for whole")
	}

	// The plugin's end: the connection closes and the hold ends at once.
	c = dial(t, socket)
	if _, err := protocol.Call(c, &protocol.Request{Op: protocol.OpHold, Volume: "v", Hold: &protocol.HoldArgs{Limit: time.Hour}}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	wrote = writeFile(vol, "C.TXT")
	closed := time.Now()
	c.Close()
	select {
	case at := <-wrote:
		if d := at.Sub(closed); d > 5*time.Second {
			t.Errorf("the hold lasted %v after its connection closed", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hold outlived its connection")
	}

	// Anything but a release on a holding connection ends the hold and the connection.
	c = dial(t, socket)
	if _, err := protocol.Call(c, &protocol.Request{Op: protocol.OpHold, Volume: "v", Hold: &protocol.HoldArgs{Limit: time.Hour}}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	wrote = writeFile(vol, "D.TXT")
	if _, err := protocol.Call(c, &protocol.Request{Op: protocol.OpStatus}, 5*time.Second); err == nil {
		t.Error("status on a holding connection was answered")
	}
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the hold outlived a request that ended it")
	}

	// Malformed holds and releases.
	for _, tt := range []struct {
		req  protocol.Request
		want string
	}{
		{protocol.Request{Op: protocol.OpHold}, "without its arguments"},
		{protocol.Request{Op: protocol.OpHold, Hold: &protocol.HoldArgs{}}, "hold limit"},
		{protocol.Request{Op: protocol.OpHold, Hold: &protocol.HoldArgs{Limit: -time.Second}}, "hold limit"},
		{protocol.Request{Op: protocol.OpHold, Hold: &protocol.HoldArgs{Limit: protocol.MaxHold + time.Second}}, "hold limit"},
		{protocol.Request{Op: protocol.OpRelease}, "nothing is held"},
	} {
		_, err := protocol.Call(dial(t, socket), &tt.req, 5*time.Second)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %+v = %v, want %q", tt.req.Op, tt.req.Hold, err, tt.want)
		}
	}
	// The volume is whole and takes writes after all of it.
	if _, err := vol.Stat("D.TXT"); err != nil {
		t.Fatal(err)
	}
}
