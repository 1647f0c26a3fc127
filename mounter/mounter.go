// Package mounter is the unprivileged side of csi-fat's node plugin: a process that serves one
// volume's engine and FUSE session on descriptors the privileged plugin opened and mounted and
// handed over (package protocol), and answers the plugin's control requests. It needs no
// privilege, capability or host path: everything it touches arrives as a descriptor. It runs
// the open-time check and repair too, so that a medium's structures are parsed only by
// unprivileged code: a hostile image that crashes or hangs the parser takes down this process
// and its one volume, never the plugin.
package mounter

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatfuse"
	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// requestTimeout bounds how long a connection may take to send its next request.
const requestTimeout = 30 * time.Second

// stopWait bounds how long stop waits for the FUSE session to end once the plugin unmounted.
const stopWait = 10 * time.Second

// orphanWait is how long a mounter whose session ended (unmounted from outside) waits for the
// plugin's stop, to report how closing the volume went, before it exits anyway.
const orphanWait = time.Minute

// Server is a mounter: at most one volume, served once.
type Server struct {
	log    *slog.Logger
	exit   chan struct{} // closed when the process should exit
	exitMu sync.Once

	mu         sync.Mutex
	volumeID   string
	mountpoint string
	dev        *MeteredDevice
	vol        *fatvol.Volume
	srv        *fatfuse.Server
	checkDmg   string
	bound      int64         // the memory the process is held to (its pod's limit), 0: none
	nodeBudget int           // the nodes its FUSE server may hold, from bound; 0: no bound
	served     bool          // serve succeeded once; a second serve is refused
	held       heldFiles     // copies of what it serves on, for OpDescriptors
	handing    bool          // handing over (OpHandOver): the session's end is not an orphan's
	done       chan struct{} // closed once the session ended and the volume was closed
	closeErr   error
}

// NewServer makes a mounter that logs to log.
func NewServer(log *slog.Logger) *Server {
	return &Server{log: log, exit: make(chan struct{})}
}

// Exit is closed when the mounter is done: stopped, or its volume's session ended and nobody
// came to stop it.
func (s *Server) Exit() <-chan struct{} { return s.exit }

func (s *Server) quit() { s.exitMu.Do(func() { close(s.exit) }) }

// Serve accepts control connections on l until the mounter is done.
func (s *Server) Serve(l *net.UnixListener) error {
	go func() {
		<-s.exit
		l.Close()
	}()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			select {
			case <-s.exit:
				return nil
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return err
		}
		go s.handle(c)
	}
}

// handle answers a connection's requests, one after the other, until it ends or errs.
func (s *Server) handle(c *net.UnixConn) {
	defer c.Close()
	for {
		var req protocol.Request
		files, err := protocol.Receive(c, &req, time.Now().Add(requestTimeout))
		if err != nil {
			if protocol.IsEOF(err) {
				return
			}
			var pe *protocol.Error
			if errors.As(err, &pe) {
				s.log.Warn("refusing a malformed request", "error", err)
				protocol.Send(c, &protocol.Response{Version: protocol.Version, Error: err.Error(), Code: protocol.CodeInvalid})
			}
			return
		}
		if err := protocol.CheckRequest(&req, len(files)); err != nil {
			for _, f := range files {
				f.Close()
			}
			s.log.Warn("refusing a request", "op", req.Op, "error", err)
			protocol.Send(c, &protocol.Response{Version: protocol.Version, Error: err.Error(), Code: protocol.CodeInvalid})
			return
		}
		if req.Op == protocol.OpWatch {
			// Never answered: the connection ends with the process, or when the plugin that
			// watched is gone (a restarted plugin watches anew). Not when this server quits: the
			// process's descriptors close only once every thread of it has ended, and until then
			// a thread of its FUSE server may still read requests from the connection, which it
			// would never answer. The plugin starts a takeover at this connection's end (after a
			// hand-over too), and the next server's resend must come after the last such read.
			var b [1]byte
			c.SetReadDeadline(time.Time{})
			c.Read(b[:])
			return
		}
		if req.Op == protocol.OpDescriptors {
			if err := s.sendDescriptors(c); err != nil {
				s.log.Warn("answering", "op", req.Op, "error", err)
				return
			}
			continue
		}
		if req.Op == protocol.OpHold {
			s.hold(c, &req) // the connection ends with its hold
			return
		}
		// Status is asked often; a grow that grows is logged by the engine, one that has
		// nothing to do changes nothing; the version is logged at start.
		if req.Op != protocol.OpStatus && req.Op != protocol.OpGrow && req.Op != protocol.OpBuild {
			s.log.Info("request", "op", req.Op, "volume", req.Volume)
		}
		resp := s.do(&req, files)
		resp.Version = protocol.Version
		if resp.Error != "" {
			s.log.Warn("request failed", "op", req.Op, "volume", req.Volume, "error", resp.Error)
		}
		if err := protocol.Send(c, resp); err != nil {
			s.log.Warn("answering", "op", req.Op, "error", err)
			return
		}
		if (req.Op == protocol.OpStop || req.Op == protocol.OpHandOver) && resp.Error == "" {
			s.quit()
			return
		}
	}
}

func fail(err error, code string) *protocol.Response {
	return &protocol.Response{Error: err.Error(), Code: code}
}

// fault applies the test hook for op on volume.
func fault(op, volume string) {
	v := os.Getenv(protocol.FaultEnv)
	kind, text, ok := strings.Cut(v, ":")
	if !ok || text == "" || !strings.Contains(volume, text) || !strings.HasPrefix(kind, op+"-") {
		return
	}
	switch strings.TrimPrefix(kind, op+"-") {
	case "panic":
		panic("test fault: " + v)
	case "hang":
		select {}
	case "alloc":
		// As a parser told by a hostile medium to allocate without end: keep and touch 1 MiB
		// after 1 MiB, up to 4 GiB.
		var kept [][]byte
		for range 4096 {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			kept = append(kept, b)
		}
		panic(fmt.Sprintf("test fault %s: allocated %d MiB", v, len(kept)))
	}
}

func (s *Server) do(req *protocol.Request, files []*os.File) *protocol.Response {
	switch req.Op {
	case protocol.OpCheck:
		return s.check(req, files[0])
	case protocol.OpServe:
		var direct, state *os.File
		if req.Serve.State {
			state, files = files[len(files)-1], files[:len(files)-1]
		}
		if len(files) > 2 {
			direct = files[2]
		}
		return s.serve(req, files[0], files[1], direct, state)
	case protocol.OpStatus:
		return &protocol.Response{Status: s.status(req.Files)}
	case protocol.OpSync:
		s.mu.Lock()
		vol, done := s.vol, s.done
		s.mu.Unlock()
		if vol == nil || closed(done) {
			return fail(errors.New("no volume is served"), protocol.CodeInvalid)
		}
		if err := vol.Sync(); err != nil {
			return fail(fmt.Errorf("write back: %w", err), "")
		}
		return &protocol.Response{}
	case protocol.OpStop:
		return s.stop()
	case protocol.OpRelease:
		return fail(errors.New("nothing is held on this connection: release follows hold on the connection that holds"), protocol.CodeInvalid)
	case protocol.OpGrow:
		return s.grow()
	case protocol.OpMemory:
		return &protocol.Response{Memory: s.memory()}
	case protocol.OpBuild:
		return &protocol.Response{Build: buildVersion()}
	case protocol.OpHandOver:
		return s.handOver()
	}
	return fail(fmt.Errorf("unknown operation %q", req.Op), protocol.CodeInvalid)
}

func closed(c chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// check checks the device, repairing when asked. The descriptor is closed afterwards: the
// plugin hands it over again to serve.
func (s *Server) check(req *protocol.Request, f *os.File) *protocol.Response {
	claim := blockdev.ExclusiveReadOnly
	if req.Check.Repair {
		claim = blockdev.Exclusive
	}
	dev, err := blockdev.FromFile(f, "device of "+req.Volume, claim)
	if err != nil {
		return fail(err, "")
	}
	defer dev.Close()
	if b := req.Check.MemoryLimit; b > 0 {
		holdMemory(b, 0) // no page buffers yet
		s.mu.Lock()
		s.bound = b
		s.mu.Unlock()
	}
	fault("check", req.Volume)
	res, err := Check(dev, req.Check.Partition, req.Check.Repair, req.Check.Walk, checkMemory(req.Check.MemoryLimit))
	if err != nil {
		return fail(err, protocol.CodeNotFAT)
	}
	if len(res.Repaired) > 0 {
		s.log.Warn("repaired before serving (as fsck.fat -a would)", "volume", req.Volume, "repaired", res.Repaired)
	}
	return &protocol.Response{Check: res}
}

// serve opens the volume on the device and serves it on the mounted FUSE descriptor; large
// reads and writes go through direct, the device's O_DIRECT twin, when the plugin sent one. With
// state, the FUSE server keeps in it what another server needs to take the connection over, and
// with Resume this one takes over a live connection from it.
func (s *Server) serve(req *protocol.Request, devFile, fuseFile, direct, state *os.File) *protocol.Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	// What is not handed on below is closed on the way out.
	var keep heldFiles
	defer func() {
		for _, f := range []*os.File{devFile, fuseFile, direct, state} {
			if f != nil {
				f.Close()
			}
		}
		keep.close()
	}()
	if s.served {
		return fail(errors.New("this mounter serves a volume already"), protocol.CodeInvalid)
	}
	a := req.Serve
	opts, err := mountopt.ParseOptions(a.Options)
	if err != nil {
		return fail(err, protocol.CodeInvalid)
	}
	// Copies of everything served on, which the plugin may ask back (OpDescriptors) after a
	// restart: the server and the engine own the originals.
	if keep, err = copies(fuseFile, devFile, direct, state); err != nil {
		return fail(err, "")
	}
	claim := blockdev.Exclusive
	if opts.ReadOnly {
		claim = blockdev.ExclusiveReadOnly
	}
	file, err := blockdev.FromFile(devFile, a.Source, claim)
	devFile = nil // the device's now, closed with it
	if err != nil {
		return fail(err, "")
	}
	if direct != nil {
		// Without it every read and write goes through the page cache, as before: slower, not
		// wrong. A read-only staging's twin must be open for reading alone (AttachDirect).
		if err := file.AttachDirect(direct); err != nil {
			s.log.Warn("large reads and writes go through the page cache", "volume", req.Volume, "reason", err)
		}
		direct = nil
	}
	fault("serve", req.Volume)
	if a.Resume {
		fault("resume", req.Volume)
	}
	// A superfloppy is served whole, a partitioned stick's named (or first FAT) partition through
	// a window that bounds every write.
	fsDev, _, err := layout.Open(file, a.Partition)
	if err != nil {
		file.Close()
		return fail(fmt.Errorf("open volume %s: %w", req.Volume, err), protocol.CodeNotFAT)
	}
	dev := NewMeteredDevice(fsDev, a.Source)
	vo := fatfuse.VolumeOptions(opts)
	vo.Flush = a.Mode == "flush" || opts.Flush
	vo.Sync = a.Mode == "sync" || opts.Sync
	vo.CacheBytes = a.CacheBytes
	cache := a.CacheBytes
	if cache <= 0 {
		cache = fatvol.DefaultCacheBytes
	}
	if a.MemoryLimit > 0 {
		holdMemory(a.MemoryLimit, cache)
		s.bound = a.MemoryLimit
	}
	vo.DirCacheBytes = dirCacheBytes(a.MemoryLimit, cache)
	vo.Checked = a.Checked
	vo.Logger = s.log.With("volume", req.Volume)
	vol, err := fatvol.Open(dev, vo)
	if err != nil {
		dev.Close()
		return fail(fmt.Errorf("open volume %s: %w", req.Volume, err), protocol.CodeNotFAT)
	}
	fatfuse.SoleVolumeGC() // a mounter serves one volume
	// The server takes the descriptor number it serves as its own and closes it when the
	// session ends: it gets a duplicate, so that closing fuseFile can never close a descriptor
	// number reused since (say, a control connection's).
	fuseFD, err := unix.FcntlInt(fuseFile.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		vol.Close()
		return fail(fmt.Errorf("duplicate the FUSE descriptor: %w", err), "")
	}
	conn := fatfuse.Connection{FD: fuseFD, Mountpoint: a.Mountpoint, State: state}
	var srv *fatfuse.Server
	if a.Resume {
		srv, err = fatfuse.TakeOver(vol, conn, opts)
	} else {
		srv, err = fatfuse.ServeConnection(vol, conn, opts)
	}
	if err != nil {
		vol.Close()
		return fail(err, "")
	}
	state = nil // the server's now; the copy in keep is the mounter's
	if n := nodeBudget(a.MemoryLimit, cache); n > 0 {
		srv.SetNodeBudget(n)
		s.nodeBudget = n
	}
	s.served = true
	s.held, keep = keep, heldFiles{}
	s.volumeID, s.mountpoint, s.dev, s.vol, s.srv, s.checkDmg = req.Volume, a.Mountpoint, dev, vol, srv, a.Damage
	s.done = make(chan struct{})
	done := s.done
	go func() {
		srv.Wait()
		s.mu.Lock()
		handing := s.handing
		s.mu.Unlock()
		var err error
		switch {
		case handing:
			// Paused with everything written back: the volume is the next server's as it
			// stands (its close would write), and this process ends.
			s.log.Info("session handed over; the volume is left to the next server", "volume", req.Volume)
		default:
			if err = vol.Close(); err != nil {
				s.log.Error("writing back at the end of the session", "volume", req.Volume, "error", err)
			} else {
				s.log.Info("session ended; volume written back and closed", "volume", req.Volume)
			}
		}
		s.mu.Lock()
		s.closeErr = err
		s.held.close()
		s.mu.Unlock()
		close(done)
		if !handing {
			time.AfterFunc(orphanWait, s.quit)
		}
	}()
	s.log.Info("serving", "volume", req.Volume, "mountpoint", a.Mountpoint, "source", a.Source, "readOnly", opts.ReadOnly, "resumed", a.Resume)
	return &protocol.Response{}
}

// status reports the volume's state.
func (s *Server) status(files bool) *protocol.Status {
	s.mu.Lock()
	st := &protocol.Status{PID: os.Getpid(), Volume: s.volumeID, Mountpoint: s.mountpoint, CheckDamage: s.checkDmg}
	vol, srv, dev, done := s.vol, s.srv, s.dev, s.done
	s.mu.Unlock()
	if vol == nil {
		return st
	}
	FillStatus(st, vol, srv, dev, !closed(done), true, files)
	return st
}

// FillStatus fills in st what a served volume's state says: whether it is serving, its fence,
// damage and FUSE failure, its device's counters, and, while serving, its dirty bytes and with
// stats its statfs figures (file counts too with files). The plugin's in-process server reports
// through it too, so that both modes' volume conditions read the same.
func FillStatus(st *protocol.Status, vol *fatvol.Volume, srv *fatfuse.Server, dev *MeteredDevice, serving, stats, files bool) {
	st.Serving = serving
	if err := vol.Err(); err != nil {
		st.Fence = err.Error()
	}
	if err := vol.Damage(); err != nil {
		st.Damage = err.Error()
	}
	if err := srv.Failure(); err != nil {
		st.Failure = err.Error()
	}
	st.Device = dev.Counters()
	if !st.Serving {
		return
	}
	st.DirtyBytes = vol.DirtyBytes()
	if !stats {
		return
	}
	s, err := StatsOf(vol, files)
	if err != nil {
		st.StatsError = err.Error()
	} else {
		st.Stats = s
	}
}

// stop waits for the session to end (the plugin unmounted it) and reports how closing the
// volume went; the mounter exits after answering.
func (s *Server) stop() *protocol.Response {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return &protocol.Response{}
	}
	select {
	case <-done:
	case <-time.After(stopWait):
		return fail(fmt.Errorf("the FUSE session did not end within %v; is the volume still mounted?", stopWait), "")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeErr != nil {
		return fail(fmt.Errorf("write back: %w", s.closeErr), "")
	}
	return &protocol.Response{}
}
