// Package protocol is the wire protocol between the privileged node plugin and an unprivileged
// mounter (package mounter): one request and one response per connection turn, each a single
// SOCK_SEQPACKET message holding a JSON object of at most MaxMessage bytes, with the file
// descriptors a request carries (SCM_RIGHTS) in the same message. Every message names the
// protocol's Version; a peer refuses another. A message that is too long, malformed, of another
// version or with the wrong descriptors is answered with an error (never a hang: every read has
// a deadline, never a panic), and descriptors that should not have come are closed.
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the protocol's version. A change that an older peer would misread gets a new one.
const Version = 1

// MaxMessage bounds a message's JSON; a longer one is refused.
const MaxMessage = 64 << 10

// MaxFDs bounds the descriptors one message may carry: a serve with its direct twin and its
// state, or the answer of OpDescriptors. A mounter older than ServeArgs.State took 3 at most;
// only a plugin of its own version sends it four.
const MaxFDs = 4

// Operations.
const (
	// OpCheck checks (and, when asked, repairs) the file system on the device it carries, the one
	// descriptor, before it is served: the medium's structures are parsed by the mounter only.
	OpCheck = "check"
	// OpServe serves the volume: descriptors are the device and the already mounted /dev/fuse.
	OpServe = "serve"
	// OpStatus reports the volume's health, counters and (with Files) its statfs figures.
	OpStatus = "status"
	// OpSync writes everything back to the device and makes it durable.
	OpSync = "sync"
	// OpStop is sent once the plugin has unmounted the volume: the mounter waits for the FUSE
	// session to end, closes the volume (writing back, marking it clean), answers and exits. A
	// mounter that serves nothing exits at once.
	OpStop = "stop"
	// OpWatch is never answered: the connection stays open while the mounter lives, so its end
	// tells the plugin that the mounter is gone.
	OpWatch = "watch"
	// OpHold writes the volume back and holds every operation on it, so that the plugin can copy
	// the device as it is (a snapshot, a clone); it is answered once the hold is in place. The
	// hold belongs to the connection: it ends at the OpRelease that follows on it, when the
	// connection ends (the plugin is gone), or when HoldArgs.Limit passes, whichever comes first.
	// A hold that ended before OpRelease closes the connection, so the copy is known to be void.
	OpHold = "hold"
	// OpRelease ends the hold of its connection and answers how long it lasted.
	OpRelease = "release"
	// OpGrow grows the served file system to its device's size now (the plugin grew the image),
	// while in use; the answer's Grow says the new size. A mounter older than this operation
	// answers it as unknown (CodeInvalid), so the version stays.
	OpGrow = "grow"
	// OpMemory reports the mounter's memory against its bound (Response.Memory). It is an
	// operation of its own, not a field of Status, because a peer refuses fields it does not
	// know: a mounter older than it answers it as unknown (CodeInvalid), and an older plugin,
	// which never asks, never meets the field.
	OpMemory = "memory"
	// OpDescriptors answers, by SCM_RIGHTS, copies of what the mounter serves on: its /dev/fuse
	// descriptor, its device, the device's O_DIRECT twin when it has one and the state
	// descriptor (Response.Descriptors says which came). A restarted plugin gets back the copies
	// it holds so that a mounter's death does not end the connection. The mounter keeps its own.
	// A mounter older than it answers it as unknown, and is then not held.
	OpDescriptors = "descriptors"
	// OpHandOver ends a planned hand-over: the mounter stops serving (every request answered,
	// everything written back, the state descriptor complete), answers and exits, leaving the
	// volume as it stands (its close would write) and the FUSE connection, alive in the plugin's
	// copy, to a new mounter that takes it over (ServeArgs.Resume). A mounter that was not given a
	// state descriptor refuses it.
	OpHandOver = "hand-over"
	// OpBuild answers the mounter's build (Response.Build: its version), so that a plugin of
	// another version can hand its volume over to a mounter of its own. A mounter older than it
	// answers it as unknown.
	OpBuild = "build"
)

// MaxHold bounds HoldArgs.Limit: applications wait while a volume is held.
const MaxHold = time.Hour

// FDCount is how many descriptors each operation carries.
var FDCount = map[string]int{OpCheck: 1, OpServe: 2, OpStatus: 0, OpSync: 0, OpStop: 0, OpWatch: 0, OpHold: 0, OpRelease: 0, OpGrow: 0, OpMemory: 0,
	OpDescriptors: 0, OpHandOver: 0, OpBuild: 0}

// Request is what the plugin asks.
type Request struct {
	Version int    `json:"version"`
	Op      string `json:"op"`
	// Volume is the volume's ID, for the mounter's log and its status.
	Volume string     `json:"volume,omitempty"`
	Check  *CheckArgs `json:"check,omitempty"`
	Serve  *ServeArgs `json:"serve,omitempty"`
	Hold   *HoldArgs  `json:"hold,omitempty"`
	// Files asks OpStatus for the file counts too (a walk of the directories).
	Files bool `json:"files,omitempty"`
}

// CheckArgs say how to check.
type CheckArgs struct {
	// Repair repairs what fsck.Repair repairs safely; false only checks.
	Repair bool `json:"repair"`
	// Walk also opens the volume read-only and reads every directory, as adopting a device does.
	Walk bool `json:"walk,omitempty"`
	// Partition names the partition of a partitioned medium to check (its number, or a GPT
	// partition's unique GUID); "" checks a superfloppy whole, else the first FAT partition.
	// Left out when "", so a request without it is what every mounter of version 1 reads; a
	// mounter older than the field refuses a request with it (unknown fields are refused), never
	// checks another partition than the one named.
	Partition string `json:"partition,omitempty"`
	// MemoryLimit is the memory the mounter is held to (its pod's limit), 0 for none: the
	// mounter sets the Go runtime's limit below it. Left out when 0, as Partition.
	MemoryLimit int64 `json:"memoryLimit,omitempty"`
}

// ServeArgs say how to serve.
type ServeArgs struct {
	// Options are fatfuse's mount options (mountopt.ParseOptions), complete: owner, masks, ro.
	Options string `json:"options"`
	// Mode is the volume's write mode (writeback, flush, sync).
	Mode string `json:"mode,omitempty"`
	// CacheBytes bounds the dirty data held in memory (0: the engine's default).
	CacheBytes int64 `json:"cacheBytes,omitempty"`
	// Source is the device's path as the mount table shows it, Mountpoint the staging path: for
	// logs and status only, the mounter opens neither.
	Source     string `json:"source"`
	Mountpoint string `json:"mountpoint"`
	// Damage is why the volume is served read-only, from the check; "" when clean.
	Damage string `json:"damage,omitempty"`
	// Checked lets a clean close clear the dirty bit: the volume was checked just before.
	Checked bool `json:"checked,omitempty"`
	// Partition names the partition to serve, as CheckArgs.Partition: only its bounds are read
	// and written.
	Partition string `json:"partition,omitempty"`
	// Direct: a third descriptor follows, the device open with O_DIRECT (for reading and
	// writing, for reading alone when the volume is served read-only), through which the engine
	// reads and writes large extents (blockdev.File.AttachDirect; one open for writing only
	// serves writes). The mounter cannot open the device itself. A mounter older than this field
	// refuses the third descriptor.
	Direct bool `json:"direct,omitempty"`
	// MemoryLimit is the memory the mounter is held to (its pod's limit: the pod's overhead
	// plus CacheBytes), 0 for none: the mounter sets the Go runtime's limit to what the engine's
	// page buffers (outside the Go heap, CacheBytes at most) and the binary leave of it. Left out
	// when 0; a mounter older than the field refuses a request with it.
	MemoryLimit int64 `json:"memoryLimit,omitempty"`
	// State: a last descriptor follows, a memfd the plugin made and keeps, in which the FUSE
	// server keeps what another server needs to take its connection over. Left out when false;
	// a mounter older than it refuses a request with it.
	State bool `json:"state,omitempty"`
	// Resume: the FUSE descriptor is a live connection whose server ended (it died, or handed
	// over): take it over from the state descriptor, without INIT, instead of serving afresh.
	// Takes State.
	Resume bool `json:"resume,omitempty"`
}

// Descriptors says which descriptors OpDescriptors' answer carries, in this order: the FUSE
// descriptor and the device always, then the twin with Direct, then the state with State.
type Descriptors struct {
	Direct bool `json:"direct,omitempty"`
	State  bool `json:"state,omitempty"`
}

// Count is how many descriptors follow.
func (d *Descriptors) Count() int {
	n := 2
	if d.Direct {
		n++
	}
	if d.State {
		n++
	}
	return n
}

// HoldArgs say how long a hold may last at most.
type HoldArgs struct {
	// Limit ends the hold if no OpRelease came by then (0 < Limit <= MaxHold).
	Limit time.Duration `json:"limit"`
}

// HoldResult is OpRelease's answer.
type HoldResult struct {
	// Held is how long operations were held.
	Held time.Duration `json:"held"`
}

// Response is the mounter's answer.
type Response struct {
	Version int    `json:"version"`
	Error   string `json:"error,omitempty"`
	// Code classifies Error: "" (internal), CodeInvalid (a bad request), CodeDamaged (the check
	// found what cannot be served under the policy), CodeNotFAT (no FAT file system).
	Code   string       `json:"code,omitempty"`
	Check  *CheckResult `json:"check,omitempty"`
	Status *Status      `json:"status,omitempty"`
	Hold   *HoldResult  `json:"hold,omitempty"`
	Grow   *GrowResult  `json:"grow,omitempty"`
	Memory *Memory      `json:"memory,omitempty"`
	// Descriptors answers OpDescriptors, Build OpBuild.
	Descriptors *Descriptors `json:"descriptors,omitempty"`
	Build       string       `json:"build,omitempty"`
}

// Error codes.
const (
	CodeInvalid = "invalid"
	CodeNotFAT  = "not-fat"
	// CodeGrowLimit: the size is past what the file system can grow to (fatvol.ErrGrowLimit).
	CodeGrowLimit = "grow-limit"
	// CodeReadOnly: the volume is served read-only and cannot grow.
	CodeReadOnly = "read-only"
)

// GrowResult is the file system's size after OpGrow, and whether it grew.
type GrowResult struct {
	Bytes int64 `json:"bytes"`
	Grew  bool  `json:"grew,omitempty"`
}

// CheckResult is what a check found.
type CheckResult struct {
	// Clean: no errors left (after repair, if repairing).
	Clean bool `json:"clean"`
	// Repaired lists what was repaired; Left the errors left; Unrepairable tells that some of
	// them are beyond safe repair (as opposed to not repaired because only checking).
	Repaired     []string `json:"repaired,omitempty"`
	Left         []string `json:"left,omitempty"`
	Unrepairable bool     `json:"unrepairable,omitempty"`
	// Total counts the problems left when Left was cut short.
	Total int `json:"total,omitempty"`
	// Label is the volume label as the engine reads it (the root directory's, else the boot
	// sector's), when the check walked a clean volume.
	Label string `json:"label,omitempty"`
}

// Status is a served volume's state.
type Status struct {
	PID        int    `json:"pid"`
	Volume     string `json:"volume,omitempty"`
	Mountpoint string `json:"mountpoint,omitempty"`
	// Serving: the FUSE session is alive.
	Serving bool `json:"serving"`
	// Fence is the engine's refusal of writes after a device failure (fatvol.Volume.Err).
	Fence string `json:"fence,omitempty"`
	// Damage found while serving (fatvol.Volume.Damage).
	Damage string `json:"damage,omitempty"`
	// Failure is the I/O error that turned the mount read-only (errors=remount-ro).
	Failure string `json:"failure,omitempty"`
	// CheckDamage is why the volume is served read-only after the check, as ServeArgs.Damage.
	CheckDamage string `json:"checkDamage,omitempty"`
	DirtyBytes  int64  `json:"dirtyBytes"`
	Device      Device `json:"device"`
	// Stats are the statfs figures; StatsError says why they are missing.
	Stats      *Stats `json:"stats,omitempty"`
	StatsError string `json:"statsError,omitempty"`
}

// Memory is what a server holds in memory (OpMemory). A mounter reports its process's figures;
// the plugin's in-process server only Nodes, since the process is the plugin's.
type Memory struct {
	// Resident is the process's resident memory in bytes.
	Resident int64 `json:"resident,omitempty"`
	// Bound is what the process is held to (ServeArgs.MemoryLimit), GoLimit the Go runtime's
	// memory limit set from it; 0 for none.
	Bound   int64 `json:"bound,omitempty"`
	GoLimit int64 `json:"goLimit,omitempty"`
	// Nodes are the files and directories the kernel knows and the server holds for it; past
	// NodeBudget (0: none) the server has the kernel forget those it has not used lately.
	Nodes      int64 `json:"nodes"`
	NodeBudget int64 `json:"nodeBudget,omitempty"`
}

// Device are the device's counters.
type Device struct {
	Reads, Writes, BytesRead, BytesWritten, Flushes int64
	Errors                                          int64
	LastError                                       string `json:",omitempty"`
}

// Stats are bytes and file counts, as NodeGetVolumeStats reports them.
type Stats struct {
	TotalBytes, AvailableBytes, UsedBytes int64
	TotalFiles, FreeFiles, UsedFiles      int64
	Files                                 bool // the file counts were asked for and are set
}

// Error is a protocol error: a message that cannot be read as one of this protocol.
type Error struct{ Msg string }

func (e *Error) Error() string { return "mounter protocol: " + e.Msg }

func protoErr(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// Send writes v as one message with the descriptors fds.
func Send(c *net.UnixConn, v any, fds ...int) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(data) > MaxMessage {
		return protoErr("message of %d bytes exceeds %d", len(data), MaxMessage)
	}
	if len(fds) > MaxFDs {
		return protoErr("%d descriptors exceed %d", len(fds), MaxFDs)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(data, oob, nil)
	if err != nil {
		return err
	}
	if n != len(data) || oobn != len(oob) {
		return protoErr("short write: %d of %d bytes", n, len(data))
	}
	return nil
}

// Receive reads one message into v, waiting until deadline (zero: forever, for OpWatch). It
// returns the descriptors the message carried, as files; on error none are left open. EOF
// before a message is io.EOF, as net reports it.
func Receive(c *net.UnixConn, v any, deadline time.Time) ([]*os.File, error) {
	if err := c.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	buf := make([]byte, MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4)+unix.CmsgSpace(4)) // room to see one too many
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	files, ferr := parseRights(oob[:oobn])
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	if err != nil {
		closeAll()
		return nil, err
	}
	if n == 0 && oobn == 0 {
		return nil, eof
	}
	switch {
	case ferr != nil:
		closeAll()
		return nil, ferr
	case flags&unix.MSG_CTRUNC != 0:
		closeAll()
		return nil, protoErr("too many descriptors in one message (at most %d)", MaxFDs)
	case flags&unix.MSG_TRUNC != 0 || n > MaxMessage:
		closeAll()
		return nil, protoErr("message longer than %d bytes", MaxMessage)
	case len(files) > MaxFDs:
		closeAll()
		return nil, protoErr("%d descriptors in one message (at most %d)", len(files), MaxFDs)
	}
	dec := json.NewDecoder(bytes.NewReader(buf[:n]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		closeAll()
		return nil, protoErr("malformed message: %v", err)
	}
	if dec.More() {
		closeAll()
		return nil, protoErr("malformed message: data after the JSON object")
	}
	var ver int
	switch m := v.(type) {
	case *Request:
		ver = m.Version
	case *Response:
		ver = m.Version
	default:
		ver = Version
	}
	if ver != Version {
		closeAll()
		return nil, protoErr("message of protocol version %d; this side speaks version %d", ver, Version)
	}
	return files, nil
}

var eof = errors.New("EOF: the peer closed the connection")

// IsEOF tells whether err is the peer's end of the connection before a message.
func IsEOF(err error) bool { return errors.Is(err, eof) }

// parseRights turns SCM_RIGHTS control messages into files; anything else is an error, after
// closing whatever descriptors did arrive.
func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, protoErr("control message: %v", err)
	}
	var files []*os.File
	var bad error
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			bad = protoErr("control message that is not SCM_RIGHTS")
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("received-fd-%d", fd)))
		}
	}
	return files, bad
}

// CheckRequest validates what the receiving mounter cannot take: the operation, its
// descriptors and arguments.
func CheckRequest(r *Request, nfds int) error {
	want, ok := FDCount[r.Op]
	if !ok {
		return protoErr("unknown operation %q", r.Op)
	}
	if r.Op == OpServe && r.Serve != nil {
		if r.Serve.Direct {
			want++
		}
		if r.Serve.State {
			want++
		}
	}
	if nfds != want {
		return protoErr("operation %s takes %d descriptors, the message carried %d", r.Op, want, nfds)
	}
	switch r.Op {
	case OpCheck:
		if r.Check == nil {
			return protoErr("operation check without its arguments")
		}
	case OpServe:
		if r.Serve == nil {
			return protoErr("operation serve without its arguments")
		}
		if r.Serve.Resume && !r.Serve.State {
			return protoErr("operation serve resumes a connection without its state descriptor")
		}
	case OpHold:
		if r.Hold == nil {
			return protoErr("operation hold without its arguments")
		}
		if r.Hold.Limit <= 0 || r.Hold.Limit > MaxHold {
			return protoErr("hold limit %v is not in (0, %v]", r.Hold.Limit, MaxHold)
		}
	}
	return nil
}

// Call sends a request with its descriptors and reads the response, within timeout. A
// response carrying an error is returned as a *RemoteError.
func Call(c *net.UnixConn, req *Request, timeout time.Duration, fds ...int) (*Response, error) {
	req.Version = Version
	if err := Send(c, req, fds...); err != nil {
		return nil, err
	}
	var resp Response
	files, err := Receive(c, &resp, time.Now().Add(timeout))
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return nil, err
	}
	if len(files) > 0 {
		return nil, protoErr("a response carried %d descriptors", len(files))
	}
	if resp.Error != "" {
		return &resp, &RemoteError{Msg: resp.Error, Code: resp.Code}
	}
	return &resp, nil
}

// CallFiles is Call for the one operation whose answer carries descriptors (OpDescriptors):
// they are returned, as many as the answer says, or none with an error.
func CallFiles(c *net.UnixConn, req *Request, timeout time.Duration) (*Response, []*os.File, error) {
	req.Version = Version
	if err := Send(c, req); err != nil {
		return nil, nil, err
	}
	var resp Response
	files, err := Receive(c, &resp, time.Now().Add(timeout))
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if resp.Error != "" {
		closeAll()
		return &resp, nil, &RemoteError{Msg: resp.Error, Code: resp.Code}
	}
	if resp.Descriptors == nil || resp.Descriptors.Count() != len(files) {
		closeAll()
		return nil, nil, protoErr("an answer carried %d descriptors, not those it names (%+v)", len(files), resp.Descriptors)
	}
	return &resp, files, nil
}

// RemoteError is an error the mounter answered.
type RemoteError struct{ Msg, Code string }

func (e *RemoteError) Error() string { return e.Msg }
