package protocol

import (
	"encoding/json"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair is a connected SOCK_SEQPACKET pair.
func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestRoundTripWithDescriptors(t *testing.T) {
	a, b := pair(t)
	f, err := os.CreateTemp(t.TempDir(), "dev")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("hello")
	defer f.Close()
	req := &Request{Version: Version, Op: OpCheck, Volume: "v", Check: &CheckArgs{Repair: true}}
	if err := Send(a, req, int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	var got Request
	files, err := Receive(b, &got, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || got.Op != OpCheck || got.Check == nil || !got.Check.Repair {
		t.Fatalf("got %+v with %d files", got, len(files))
	}
	buf := make([]byte, 5)
	if _, err := files[0].ReadAt(buf, 0); err != nil || string(buf) != "hello" {
		t.Fatalf("received descriptor reads %q, %v", buf, err)
	}
	files[0].Close()
	if err := CheckRequest(&got, 1); err != nil {
		t.Fatal(err)
	}
}

// sendRaw writes bytes as one message, with descriptors, bypassing Send's checks.
func sendRaw(t *testing.T, c *net.UnixConn, data []byte, fds ...int) {
	t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(data, oob, nil); err != nil {
		t.Fatal(err)
	}
}

// TestHostileMessages: every message that is not this protocol's gets a clear error, within
// the deadline, without a panic, and leaves no received descriptor open.
func TestHostileMessages(t *testing.T) {
	good, _ := json.Marshal(Request{Version: Version, Op: OpStatus})
	devnull := func() int {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return int(f.Fd())
	}
	long := append([]byte(`{"version":1,"op":"status","volume":"`), []byte(strings.Repeat("x", MaxMessage))...)
	long = append(long, `"}`...)
	for _, tt := range []struct {
		name string
		data []byte
		fds  int
		want string
	}{
		{"too long", long, 0, "longer than"},
		{"too long with descriptors", long, 2, "longer than"},
		{"bad version", []byte(`{"version":2,"op":"status"}`), 0, "version 2"},
		{"no version", []byte(`{"op":"status"}`), 0, "version 0"},
		{"garbage", []byte("\x00\xff garbage \x01"), 0, "malformed"},
		{"garbage with descriptors", []byte("garbage"), 2, "malformed"},
		{"not an object", []byte(`[1,2,3]`), 0, "malformed"},
		{"unknown field", []byte(`{"version":1,"op":"status","evil":true}`), 0, "unknown field"},
		{"trailing data", append(append([]byte{}, good...), []byte(`{"version":1}`)...), 0, "after the JSON"},
		{"wrong type", []byte(`{"version":"1","op":7}`), 0, "malformed"},
		{"too many descriptors", good, MaxFDs + 1, "descriptors"},
		{"far too many descriptors", good, 40, "descriptors"},
		{"empty", []byte{}, 0, "EOF"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := pair(t)
			var fds []int
			for i := 0; i < tt.fds; i++ {
				fds = append(fds, devnull())
			}
			before := openFDs(t)
			sendRaw(t, a, tt.data, fds...)
			var req Request
			start := time.Now()
			files, err := Receive(b, &req, time.Now().Add(5*time.Second))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Receive = %v, %v; want an error with %q", files, err, tt.want)
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("took %v", time.Since(start))
			}
			if after := openFDs(t); after > before {
				t.Fatalf("%d descriptors open after a refused message, %d before", after, before)
			}
		})
	}
}

func TestWrongDescriptorCounts(t *testing.T) {
	for _, tt := range []struct {
		req  Request
		nfds int
		want string
	}{
		{Request{Op: OpServe, Serve: &ServeArgs{}}, 1, "takes 2 descriptors"},
		{Request{Op: OpServe, Serve: &ServeArgs{}}, 0, "takes 2 descriptors"},
		{Request{Op: OpServe, Serve: &ServeArgs{}}, 3, "takes 2 descriptors"},
		{Request{Op: OpServe, Serve: &ServeArgs{Direct: true}}, 2, "takes 3 descriptors"},
		{Request{Op: OpServe, Serve: &ServeArgs{State: true}}, 2, "takes 3 descriptors"},
		{Request{Op: OpServe, Serve: &ServeArgs{Direct: true, State: true}}, 3, "takes 4 descriptors"},
		{Request{Op: OpServe, Serve: &ServeArgs{Resume: true}}, 2, "without its state descriptor"},
		{Request{Op: OpDescriptors}, 1, "takes 0 descriptors"},
		{Request{Op: OpCheck, Check: &CheckArgs{}}, 2, "takes 1 descriptors"},
		{Request{Op: OpStatus}, 1, "takes 0 descriptors"},
		{Request{Op: OpServe}, 2, "without its arguments"},
		{Request{Op: OpCheck}, 1, "without its arguments"},
		{Request{Op: "format"}, 0, "unknown operation"},
		{Request{Op: ""}, 0, "unknown operation"},
	} {
		if err := CheckRequest(&tt.req, tt.nfds); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckRequest(%+v, %d) = %v, want %q", tt.req, tt.nfds, err, tt.want)
		}
	}
}

// TestSilentPeer: a peer that sends nothing is a timeout at the deadline, not a hang.
func TestSilentPeer(t *testing.T) {
	_, b := pair(t)
	var req Request
	start := time.Now()
	_, err := Receive(b, &req, time.Now().Add(200*time.Millisecond))
	var ne net.Error
	if err == nil || !(errorsAs(err, &ne) && ne.Timeout()) {
		t.Fatalf("Receive = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}

func errorsAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// TestSendRefusesOversize: this side never sends what the other must refuse.
func TestSendRefusesOversize(t *testing.T) {
	a, _ := pair(t)
	err := Send(a, &Request{Version: Version, Op: OpStatus, Volume: strings.Repeat("x", MaxMessage)})
	if err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("Send = %v", err)
	}
	if err := Send(a, &Request{Version: Version, Op: OpStatus}, 0, 1, 2, 0, 1); err == nil {
		t.Fatal("Send took 5 descriptors")
	}
	_ = syscall.EBADF
}

// TestPartitionCompatible: the partition a check or serve names travels; left empty it is not
// sent at all, so the request is the one every version-1 mounter reads; and a mounter whose
// arguments lack the field refuses a request that names one (unknown fields are refused) rather
// than check or serve another partition.
func TestPartitionCompatible(t *testing.T) {
	a, b := pair(t)
	req := &Request{Version: Version, Op: OpStatus, Volume: "v",
		Check: &CheckArgs{Partition: "3F2504E0-4F89-41D3-9A0C-0305E82C3301"}, Serve: &ServeArgs{Partition: "2"}}
	if err := Send(a, req); err != nil {
		t.Fatal(err)
	}
	var got Request
	if _, err := Receive(b, &got, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got.Check.Partition != req.Check.Partition || got.Serve.Partition != "2" {
		t.Fatalf("received partitions %q and %q", got.Check.Partition, got.Serve.Partition)
	}
	for _, v := range []any{CheckArgs{Repair: true}, ServeArgs{Options: "ro"}} {
		if data, _ := json.Marshal(v); strings.Contains(string(data), "partition") {
			t.Errorf("%T without a partition marshals as %s", v, data)
		}
	}
	// A mounter of the version before the field: its CheckArgs as they were.
	type oldCheckArgs struct {
		Repair bool `json:"repair"`
		Walk   bool `json:"walk,omitempty"`
	}
	var old struct {
		Version int           `json:"version"`
		Op      string        `json:"op"`
		Check   *oldCheckArgs `json:"check,omitempty"`
	}
	sendRaw(t, a, []byte(`{"version":1,"op":"check","check":{"repair":true,"partition":"2"}}`))
	if _, err := Receive(b, &old, time.Now().Add(5*time.Second)); err == nil || !strings.Contains(err.Error(), "partition") {
		t.Errorf("an older mounter's reading of a request with a partition: %v, want a refusal naming the field", err)
	}
}

// TestDescriptorsAnswer: OpDescriptors' answer brings the descriptors it names, in order; an
// answer whose descriptors are not those it names is refused with none left open.
func TestDescriptorsAnswer(t *testing.T) {
	a, b := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	answer := func(d *Descriptors, fds ...int) {
		var req Request
		files, err := Receive(b, &req, time.Now().Add(time.Second))
		if err != nil || len(files) != 0 || req.Op != OpDescriptors {
			t.Errorf("peer read %+v, %d files, %v", req, len(files), err)
		}
		if err := Send(b, &Response{Version: Version, Descriptors: d}, fds...); err != nil {
			t.Error(err)
		}
	}
	go answer(&Descriptors{State: true}, int(r.Fd()), int(w.Fd()), int(r.Fd()))
	resp, files, err := CallFiles(a, &Request{Op: OpDescriptors}, time.Second)
	if err != nil || len(files) != 3 || !resp.Descriptors.State || resp.Descriptors.Direct {
		t.Fatalf("CallFiles = %+v, %d files, %v", resp, len(files), err)
	}
	// The second came as the pipe's writing end: what is written there is read at the first.
	if _, err := files[1].Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	var buf [1]byte
	if _, err := files[0].Read(buf[:]); err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v", buf, err)
	}
	for _, f := range files {
		f.Close()
	}
	before := openFDs(t)
	go answer(&Descriptors{Direct: true, State: true}, int(r.Fd()), int(w.Fd()))
	if _, files, err := CallFiles(a, &Request{Op: OpDescriptors}, time.Second); err == nil || len(files) != 0 {
		t.Fatalf("an answer with 2 descriptors naming 4: %d files, %v", len(files), err)
	}
	if n := openFDs(t); n != before {
		t.Fatalf("%d descriptors open after a refused answer, %d before", n, before)
	}
}
