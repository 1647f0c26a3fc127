package fatfuse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
)

// TakeOver serves vol on a live connection whose previous server ended (crashed, or paused and
// ended), from the identities and settings that server kept in c.State: the node IDs and file
// handles the kernel holds name the same files and handles, and the requests the previous
// server had read and not answered are sent again by the kernel (FUSE_NOTIFY_RESEND). After a
// crash, what the previous server had not written back may be gone: the kernel's cached pages
// and attributes are dropped, nodes whose entries the volume does not have fail with EIO, and
// each handle that had written since its last fsync fails its next write, fsync or flush with
// EIO, once. Open vol (and check it) first; nothing is answered before TakeOver returns. The
// previous server's process must have ended, or at least stopped reading the descriptor.
func TakeOver(vol *fatvol.Volume, c Connection, opts mountopt.Options) (*Server, error) {
	if c.State == nil {
		return nil, fmt.Errorf("take over %s: no state file", c.Mountpoint)
	}
	st, err := loadState(c.State)
	if err != nil {
		return nil, fmt.Errorf("take over %s: %w", c.Mountpoint, err)
	}
	s := newServer(vol, c.Mountpoint, opts)
	s.state = &stateLog{f: c.State}
	lost := s.rebuild(st)
	if err := s.attach(c.FD, &st.settings); err != nil {
		return nil, fmt.Errorf("take over %s: %w", c.Mountpoint, err)
	}
	go s.loop()
	if err := resend(c.FD); err != nil {
		// Requests the previous server had taken stay unanswered; new ones are served.
		log.Printf("fatfuse: %s: asking the kernel to send unanswered requests again: %v", c.Mountpoint, err)
	}
	if !st.paused {
		go s.invalidate(lost)
	}
	return s, nil
}

// rebuild makes the tables the state describes and, after a crash, checks each linked node
// against the volume: one whose entry is not where the state says (a change never written back)
// is lost. It returns the lost nodes.
func (s *Server) rebuild(st *savedState) []*node {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sn := range st.nodes {
		c := &node{srv: s, ino: sn.ino, gen: sn.gen, isDir: sn.dir, name: sn.name, pos: sn.pos,
			lookups: sn.lookups, unlinked: sn.unlinked, lostChanges: sn.lostChanges, subdirs: -1}
		s.byIno[c.ino] = c
		if !c.unlinked {
			s.byPos[c.pos] = c
		}
		s.nextIno = max(s.nextIno, c.ino+1)
		s.nextGen = max(s.nextGen, c.gen)
	}
	for _, sn := range st.nodes {
		s.byIno[sn.ino].parent = s.byIno[sn.parent]
	}
	for _, sh := range st.handles {
		h := &handle{srv: s, fh: sh.fh, n: s.byIno[sh.ino], flags: sh.flags, dir: sh.dir,
			dirty: sh.dirty && st.paused, lostWrites: sh.lostWrites || (sh.dirty && !st.paused)}
		s.handles[h.fh] = h
		s.nextFh = max(s.nextFh, h.fh)
	}
	s.done = st.done
	if st.paused {
		return nil
	}
	var lost []*node
	for _, c := range s.byIno {
		if c == s.root || c.unlinked {
			continue
		}
		if !s.foundLocked(c) {
			lost = append(lost, c)
		}
	}
	for _, c := range lost {
		c.lost = true
		if s.byPos[c.pos] == c {
			delete(s.byPos, c.pos)
		}
	}
	for _, c := range lost {
		if p := c.parent; p != nil && !p.lost {
			p.lostChanges = true
		}
	}
	return lost
}

// foundLocked tells whether node c's entry is on the volume where the state says: its path
// leads to an entry of its kind at its position.
func (s *Server) foundLocked(c *node) bool {
	p, ok := c.pathLocked()
	if !ok {
		return false
	}
	fi, err := s.vol.Stat(p)
	return err == nil && fi.Sys().(*fatvol.Attr).Pos == c.pos && fi.IsDir() == c.isDir
}

// attach starts go-fuse on the live descriptor fd. go-fuse reads INIT before anything else, and
// the kernel answered it long ago: go-fuse is given a socket instead, on fd's number, holding the
// INIT the kernel sent the first server, and once it has answered that (the answer is dropped),
// the live descriptor is put back on the number before the request loop starts. go-fuse reads
// the descriptor blocking, so the swap is invisible to it.
func (s *Server) attach(fd int, settings *fuse.InitIn) error {
	live, err := syscall.Dup(fd)
	if err != nil {
		return fmt.Errorf("dup of /dev/fuse descriptor %d: %w", fd, err)
	}
	defer syscall.Close(live)
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	defer syscall.Close(pair[1])
	in := *settings
	in.InHeader = fuse.InHeader{Length: uint32(unsafe.Sizeof(in)), Opcode: opInit, Unique: 1}
	if _, err := syscall.Write(pair[1], unsafe.Slice((*byte)(unsafe.Pointer(&in)), unsafe.Sizeof(in))); err != nil {
		syscall.Close(pair[0])
		return fmt.Errorf("recorded INIT: %w", err)
	}
	err = syscall.Dup3(pair[0], fd, syscall.O_CLOEXEC)
	syscall.Close(pair[0])
	if err != nil {
		return fmt.Errorf("dup3 onto %d: %w", fd, err)
	}
	restored := false
	restore := func() error {
		if restored {
			return nil
		}
		restored = true
		return syscall.Dup3(live, fd, syscall.O_CLOEXEC)
	}
	defer restore()
	srv, err := fuse.NewServer(newRawFS(s), fmt.Sprintf("/dev/fd/%d", fd), s.mountOptions())
	if err != nil {
		return fmt.Errorf("recorded INIT: %w", err)
	}
	reply := make([]byte, 4096)
	n, err := syscall.Read(pair[1], reply)
	switch {
	case err != nil:
		return fmt.Errorf("answer to the recorded INIT: %w", err)
	case n < 16 || int32(binary.LittleEndian.Uint32(reply[4:])) != 0:
		return errors.New("the recorded INIT was refused")
	}
	if err := restore(); err != nil {
		return fmt.Errorf("dup3 of the live descriptor onto %d: %w", fd, err)
	}
	s.fuse = srv
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.compactLocked(false); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return srv.WaitMount()
}

// opInit is FUSE_INIT's opcode.
const opInit = 26

// notifyResend is FUSE_NOTIFY_RESEND's code (Linux 6.9).
const notifyResend = 7

// resend asks the kernel to send again every request read from the connection and not answered.
func resend(fd int) error {
	msg := make([]byte, 16)
	binary.LittleEndian.PutUint32(msg, 16)
	binary.LittleEndian.PutUint32(msg[4:], notifyResend)
	_, err := syscall.Write(fd, msg)
	return err
}

// invalidate drops what the kernel caches that the server cannot vouch for after a crash: the
// pages and attributes of every node (its writes may not have reached the medium), and the
// names of lost nodes.
func (s *Server) invalidate(lost []*node) {
	s.mu.Lock()
	inos := make([]uint64, 0, len(s.byIno))
	for ino := range s.byIno {
		inos = append(inos, ino)
	}
	type name struct {
		dir  uint64
		name string
	}
	var names []name
	for _, c := range lost {
		if c.parent != nil {
			names = append(names, name{c.parent.ino, c.name})
		}
	}
	s.mu.Unlock()
	for _, n := range names {
		s.fuse.EntryNotify(n.dir, n.name)
	}
	for _, ino := range inos {
		s.fuse.InodeNotify(ino, 0, 0)
	}
}
