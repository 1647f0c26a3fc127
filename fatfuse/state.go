package fatfuse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log"
	"os"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The state file keeps what a server taking the connection over needs: the kernel's INIT
// settings, the nodes the kernel holds and the handles it has open. It is a log of records
// appended as the tables change, each before the reply that makes the change known to the
// kernel, so a server killed at any moment leaves a state at least as new as what the kernel
// was told. Compaction writes a snapshot of the tables as a new log and then points the header
// at it; a log that grew past four times its last snapshot is compacted.
//
// Layout: a header at offset 0 (magic, version, the active log's offset, a checksum), the logs
// from stateLogStart on. A record is its payload's length, the length's complement and the
// payload's CRC-32C, then the payload: a kind byte and the kind's fields, little-endian. Only
// the last record can be cut short by a kill (its length runs past the file's end), and it is
// dropped; a whole record that fails its checksum, or a damaged length, refuses the file. The file is written by a server that handled
// untrusted media, so a reader checks every field before it trusts any (loadState).
const (
	stateMagic      = "CSIFATST"
	stateVersion    = 1
	stateHeaderSize = 28
	stateLogStart   = 4096
	stateMaxSize    = 1 << 30 // far beyond any real table; a bound for a hostile file
	recordHeader    = 12
	maxNameBytes    = 1024 // a FAT long name is at most 255 UTF-16 units: 765 UTF-8 bytes
	compactFloor    = 256 << 10
)

// Record kinds.
const (
	recSettings = 1 // the kernel's INIT: major, minor, max_readahead, flags, flags2
	recNode     = 2 // ino, gen, parent, pos, lookups, flags (nodeDir, nodeUnlinked, nodeLostChanges), name
	recNodeGone = 3 // ino
	recHandle   = 4 // fh, ino, open flags, flags (handleDir, handleDirty, handleLostWrites)
	recReleased = 5 // fh
	recPaused   = 6 // a planned hand-over: everything was written back
	recDone     = 7 // the unique number of a rename applied (done.go)
)

const (
	nodeDir         = 1
	nodeUnlinked    = 2
	nodeLostChanges = 4

	handleDir        = 1
	handleDirty      = 2
	handleLostWrites = 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// stateLog is the server's end of the state file.
type stateLog struct {
	f         *os.File
	start     int64 // the active log
	end       int64
	compactAt int64 // log size past which it is compacted
	broken    bool  // a write failed: nothing more is written, and the header says so
}

// appendLocked adds one record; the caller holds s.mu.
func (s *Server) appendLocked(payload []byte) {
	l := s.state
	if l == nil || l.broken {
		return
	}
	rec := appendRecord(make([]byte, 0, recordHeader+len(payload)), payload)
	if _, err := l.f.WriteAt(rec, l.end); err != nil {
		s.stateFailed(err)
		return
	}
	l.end += int64(len(rec))
	if l.end-l.start > l.compactAt {
		if err := s.compactLocked(false); err != nil {
			s.stateFailed(err)
		}
	}
}

// appendRecord adds a record of payload to b: its length, the length's complement (a damaged
// length is told from a record cut short), the payload's checksum, the payload.
func appendRecord(b, payload []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, ^uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(payload, crcTable))
	return append(b, payload...)
}

// stateFailed stops keeping the state after a failed write and spoils its header, so that no
// server takes the connection over from tables that fell behind the kernel's.
func (s *Server) stateFailed(err error) {
	log.Printf("fatfuse: %s: state file: %v; the connection cannot be taken over", s.mountpoint, err)
	s.state.broken = true
	s.state.f.WriteAt(make([]byte, stateHeaderSize), 0)
}

// keepSettings records the kernel's INIT and starts the state with a snapshot.
func (s *Server) keepSettings() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == nil {
		return nil
	}
	if err := s.compactLocked(false); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}

func settingsRecord(in *fuse.InitIn) []byte {
	b := []byte{recSettings}
	for _, v := range []uint32{in.Major, in.Minor, in.MaxReadAhead, in.Flags, in.Flags2} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func nodeRecord(c *node) []byte {
	b := make([]byte, 0, 44+len(c.name))
	b = append(b, recNode)
	b = binary.LittleEndian.AppendUint64(b, c.ino)
	b = binary.LittleEndian.AppendUint64(b, c.gen)
	var parent uint64
	if c.parent != nil {
		parent = c.parent.ino
	}
	b = binary.LittleEndian.AppendUint64(b, parent)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.pos))
	b = binary.LittleEndian.AppendUint64(b, c.lookups)
	var fl byte
	if c.isDir {
		fl |= nodeDir
	}
	if c.unlinked {
		fl |= nodeUnlinked
	}
	if c.lostChanges {
		fl |= nodeLostChanges
	}
	b = append(b, fl)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(c.name)))
	return append(b, c.name...)
}

func handleRecord(h *handle) []byte {
	b := make([]byte, 0, 22)
	b = append(b, recHandle)
	b = binary.LittleEndian.AppendUint64(b, h.fh)
	b = binary.LittleEndian.AppendUint64(b, h.n.ino)
	b = binary.LittleEndian.AppendUint32(b, h.flags)
	var fl byte
	if h.dir {
		fl |= handleDir
	}
	if h.dirty {
		fl |= handleDirty
	}
	if h.lostWrites {
		fl |= handleLostWrites
	}
	return append(b, fl)
}

func idRecord(kind byte, id uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte{kind}, id)
}

// saveNodeLocked records node c as it is now; the root is implied.
func (s *Server) saveNodeLocked(c *node) {
	if s.state != nil && c != s.root {
		s.appendLocked(nodeRecord(c))
	}
}

func (s *Server) saveGoneLocked(ino uint64) {
	if s.state != nil {
		s.appendLocked(idRecord(recNodeGone, ino))
	}
}

func (s *Server) saveHandleLocked(h *handle) {
	if s.state != nil {
		s.appendLocked(handleRecord(h))
	}
}

func (s *Server) saveReleasedLocked(fh uint64) {
	if s.state != nil {
		s.appendLocked(idRecord(recReleased, fh))
	}
}

// compactLocked writes the tables as a new log and points the header at it; paused ends it
// with the mark of a planned hand-over. The new log goes where it overwrites nothing of the
// active one, so a kill in between leaves the old log in force.
func (s *Server) compactLocked(paused bool) error {
	l := s.state
	var snap []byte
	add := func(payload []byte) { snap = appendRecord(snap, payload) }
	settings := s.fuse.KernelSettings()
	add(settingsRecord(settings))
	for _, c := range s.byIno {
		if c != s.root {
			add(nodeRecord(c))
		}
	}
	for _, h := range s.handles {
		add(handleRecord(h))
	}
	for _, u := range s.done {
		add(idRecord(recDone, u))
	}
	if paused {
		add([]byte{recPaused})
	}
	target := int64(stateLogStart)
	if int64(len(snap)) > l.start-stateLogStart {
		target = max(stateLogStart, (l.end+stateLogStart-1)/stateLogStart*stateLogStart)
	}
	if target+int64(len(snap)) > stateMaxSize {
		return fmt.Errorf("state of %d bytes past its bound of %d", len(snap), stateMaxSize)
	}
	if _, err := l.f.WriteAt(snap, target); err != nil {
		return err
	}
	hdr := append([]byte(stateMagic), make([]byte, 16)...)
	binary.LittleEndian.PutUint32(hdr[8:], stateVersion)
	binary.LittleEndian.PutUint64(hdr[16:], uint64(target))
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32.Checksum(hdr, crcTable))
	if _, err := l.f.WriteAt(hdr, 0); err != nil {
		return err
	}
	l.start, l.end = target, target+int64(len(snap))
	l.compactAt = max(compactFloor, 4*int64(len(snap)))
	if target == stateLogStart {
		// The log before ends here: nothing after it may be read as its continuation.
		if err := l.f.Truncate(l.end); err != nil {
			return err
		}
	}
	return nil
}

// savedState is what loadState found, checked.
type savedState struct {
	settings fuse.InitIn
	nodes    map[uint64]*savedNode
	handles  map[uint64]*savedHandle
	paused   bool
	done     []uint64 // the last renames applied, oldest first
}

type savedNode struct {
	ino, gen, parent, lookups  uint64
	pos                        int64
	dir, unlinked, lostChanges bool
	name                       string
}

type savedHandle struct {
	fh, ino                uint64
	flags                  uint32
	dir, dirty, lostWrites bool
}

// errBadState: the state file is not one a server of this version wrote, or is damaged.
var errBadState = errors.New("bad state file")

// loadState reads and checks the state file.
func loadState(f *os.File) (*savedState, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	if size < stateLogStart || size > stateMaxSize {
		return nil, fmt.Errorf("%w: size %d", errBadState, size)
	}
	hdr := make([]byte, stateHeaderSize)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return nil, err
	}
	if string(hdr[:8]) != stateMagic || crc32.Checksum(hdr[:24], crcTable) != binary.LittleEndian.Uint32(hdr[24:]) {
		return nil, fmt.Errorf("%w: no valid header", errBadState)
	}
	if v := binary.LittleEndian.Uint32(hdr[8:]); v != stateVersion {
		return nil, fmt.Errorf("%w: version %d, this server reads %d", errBadState, v, stateVersion)
	}
	start := int64(binary.LittleEndian.Uint64(hdr[16:]))
	if start < stateLogStart || start >= size {
		return nil, fmt.Errorf("%w: log at %d in a file of %d bytes", errBadState, start, size)
	}
	buf := make([]byte, size-start)
	if _, err := f.ReadAt(buf, start); err != nil {
		return nil, err
	}
	st := &savedState{nodes: map[uint64]*savedNode{}, handles: map[uint64]*savedHandle{}}
	settings := false
	for off := 0; off < len(buf); {
		if len(buf)-off < recordHeader {
			break // the last record, cut short by a kill
		}
		n := int(binary.LittleEndian.Uint32(buf[off:]))
		if uint32(n) != ^binary.LittleEndian.Uint32(buf[off+4:]) {
			return nil, fmt.Errorf("%w: record at %d has a damaged length", errBadState, start+int64(off))
		}
		if n > len(buf)-off-recordHeader {
			break // the last record, cut short
		}
		payload := buf[off+recordHeader : off+recordHeader+n]
		if n == 0 || crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(buf[off+8:]) {
			// A whole record that is wrong is damage, not a kill: what follows cannot be trusted.
			return nil, fmt.Errorf("%w: record at %d fails its checksum", errBadState, start+int64(off))
		}
		if err := st.apply(payload, &settings); err != nil {
			return nil, fmt.Errorf("%w: record at %d: %v", errBadState, start+int64(off), err)
		}
		off += recordHeader + n
	}
	if !settings {
		return nil, fmt.Errorf("%w: no INIT settings", errBadState)
	}
	if err := st.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadState, err)
	}
	return st, nil
}

// apply adds one record's change.
func (st *savedState) apply(p []byte, settings *bool) error {
	kind, p := p[0], p[1:]
	st.paused = false
	le := binary.LittleEndian
	switch kind {
	case recSettings:
		if len(p) != 20 {
			return fmt.Errorf("settings of %d bytes", len(p))
		}
		st.settings = fuse.InitIn{Major: le.Uint32(p), Minor: le.Uint32(p[4:]), MaxReadAhead: le.Uint32(p[8:]),
			Flags: le.Uint32(p[12:]), Flags2: le.Uint32(p[16:])}
		*settings = true
	case recNode:
		if len(p) < 43 || len(p) != 43+int(le.Uint16(p[41:])) {
			return fmt.Errorf("node of %d bytes", len(p))
		}
		c := &savedNode{ino: le.Uint64(p), gen: le.Uint64(p[8:]), parent: le.Uint64(p[16:]), pos: int64(le.Uint64(p[24:])),
			lookups: le.Uint64(p[32:]), dir: p[40]&nodeDir != 0, unlinked: p[40]&nodeUnlinked != 0, lostChanges: p[40]&nodeLostChanges != 0,
			name: string(p[43:])}
		if p[40]&^(nodeDir|nodeUnlinked|nodeLostChanges) != 0 || c.lostChanges && !c.dir {
			return fmt.Errorf("node %d: flags %#x", c.ino, p[40])
		}
		if err := c.check(); err != nil {
			return err
		}
		st.nodes[c.ino] = c
	case recNodeGone:
		if len(p) != 8 {
			return fmt.Errorf("node gone of %d bytes", len(p))
		}
		delete(st.nodes, le.Uint64(p))
	case recHandle:
		if len(p) != 21 {
			return fmt.Errorf("handle of %d bytes", len(p))
		}
		fl := p[20]
		if fl&^(handleDir|handleDirty|handleLostWrites) != 0 {
			return fmt.Errorf("handle flags %#x", fl)
		}
		h := &savedHandle{fh: le.Uint64(p), ino: le.Uint64(p[8:]), flags: le.Uint32(p[16:]),
			dir: fl&handleDir != 0, dirty: fl&handleDirty != 0, lostWrites: fl&handleLostWrites != 0}
		if h.fh == 0 {
			return errors.New("handle 0")
		}
		st.handles[h.fh] = h
	case recReleased:
		if len(p) != 8 {
			return fmt.Errorf("release of %d bytes", len(p))
		}
		delete(st.handles, le.Uint64(p))
	case recDone:
		if len(p) != 8 {
			return fmt.Errorf("done of %d bytes", len(p))
		}
		if len(st.done) == doneKept {
			st.done = st.done[1:]
		}
		st.done = append(st.done, le.Uint64(p))
	case recPaused:
		if len(p) != 0 {
			return fmt.Errorf("pause mark of %d bytes", len(p))
		}
		st.paused = true
	default:
		return fmt.Errorf("unknown kind %d", kind)
	}
	return nil
}

// check refuses a node no server could have made.
func (c *savedNode) check() error {
	switch {
	case c.ino <= fuse.FUSE_ROOT_ID || c.ino >= 1<<63:
		// Positions and synthetic numbers (from 1<<62) lie far below 1<<63.
		return fmt.Errorf("node %d", c.ino)
	case c.pos <= 0:
		return fmt.Errorf("node %d: entry at %d", c.ino, c.pos)
	case c.parent == 0:
		return fmt.Errorf("node %d: no parent", c.ino)
	case c.name == "" || c.name == "." || c.name == ".." || len(c.name) > maxNameBytes:
		return fmt.Errorf("node %d: name %q", c.ino, c.name)
	}
	for i := 0; i < len(c.name); i++ {
		if c.name[i] == '/' || c.name[i] == 0 {
			return fmt.Errorf("node %d: name %q", c.ino, c.name)
		}
	}
	return nil
}

// check refuses tables that do not hold together: parents that are not known directories, a
// loop of parents, two linked nodes on one entry, handles of unknown nodes.
func (st *savedState) check() error {
	if st.settings.Major != 7 {
		return fmt.Errorf("FUSE major version %d", st.settings.Major)
	}
	for _, c := range st.nodes {
		if p := st.nodes[c.parent]; c.parent != fuse.FUSE_ROOT_ID && (p == nil || !p.dir) {
			return fmt.Errorf("node %d: parent %d is no known directory", c.ino, c.parent)
		}
	}
	at := map[int64]uint64{}
	for _, c := range st.nodes {
		// Each step goes up one; more steps than nodes is a loop.
		p := c
		for steps := 0; p.parent != fuse.FUSE_ROOT_ID; steps++ {
			if steps > len(st.nodes) {
				return fmt.Errorf("node %d: its parents make a loop", c.ino)
			}
			p = st.nodes[p.parent]
		}
		if !c.unlinked {
			if other, ok := at[c.pos]; ok {
				return fmt.Errorf("nodes %d and %d both at entry %d", c.ino, other, c.pos)
			}
			at[c.pos] = c.ino
		}
	}
	for _, h := range st.handles {
		dir := h.ino == fuse.FUSE_ROOT_ID
		if c := st.nodes[h.ino]; c != nil {
			dir = c.dir
		} else if !dir {
			return fmt.Errorf("handle %d: unknown node %d", h.fh, h.ino)
		}
		if h.dir != dir {
			return fmt.Errorf("handle %d: a directory handle of a file or the reverse", h.fh)
		}
	}
	return nil
}
