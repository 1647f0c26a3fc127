package fatfuse

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
)

// cacheTimeout is how long the kernel may trust attributes and names it was given. The engine is
// the only writer and every change passes through this mount, so only our own renames and
// case-insensitive aliases can make an entry stale, and those briefly.
const cacheTimeout = time.Second

// Server is a mounted volume being served.
type Server struct {
	vol        *fatvol.Volume
	opts       mountopt.Options
	mountpoint string
	fuse       *fuse.Server
	root       *node
	geoCluster int64
	fixedRoot  int64 // bytes of a FAT12/16 fixed root directory; 0 on FAT32

	// readOnly turns on after an I/O error under errors=remount-ro; failure is that error.
	readOnly atomic.Bool
	failure  atomic.Pointer[error]

	// ns keeps the namespace still while a node's path is turned into the engine's file: held
	// for writing by unlink, rmdir and rename from the engine's change to the tables' update,
	// for reading by everything that resolves a node by its path. Else an open racing a rename
	// over its file could open the new file for the old inode, or find neither.
	ns sync.RWMutex

	mu      sync.Mutex // guards the tables, every node's place (parent, name, pos) and the state
	byPos   map[int64]*node
	byIno   map[uint64]*node
	dropped int // deletions from byPos and byIno since they were last copied (tidyLocked)
	nextIno uint64
	nextGen uint64
	handles map[uint64]*handle
	nextFh  uint64
	done    []uint64            // renames applied lately (done.go)
	state   *stateLog           // nil: nothing kept for a takeover
	fresh   map[*node]time.Time // removed files not forgotten yet, and when they were removed
	budget  int                 // nodes held at most, about (SetNodeBudget); 0: no bound
	prune   chan struct{}       // wakes the pruner (budget.go)

	gate   gate          // pause.go
	served chan struct{} // closed when go-fuse's loop ends
	resent atomic.Uint64 // requests the kernel sent again after a takeover
}

// Mount serves vol at mountpoint until Unmount, or until it is unmounted from outside (Wait
// returns then). The caller keeps the volume and closes it after Wait returns. Open vol with
// opts.VolumeOptions(): ro, shortname, sync, flush and the time zone are the engine's to apply.
func Mount(vol *fatvol.Volume, mountpoint string, opts mountopt.Options) (*Server, error) {
	if err := CheckMountpoint(mountpoint); err != nil {
		return nil, fmt.Errorf("mount %s: %w", fsName(vol), err)
	}
	return newServer(vol, mountpoint, opts).serve(mountpoint)
}

// ServeFD serves vol on a FUSE connection someone else has mounted already: fd is its
// /dev/fuse descriptor (go-fuse's /dev/fd/N mountpoint), mountpoint where it is mounted, for
// logs only. The mount's options were the mounter's to pass to mount(2); opts are still the
// server's. Unmounting is the mounter's too (umount2 of mountpoint): Unmount fails, and Wait
// returns once the kernel ends the session. Nothing is kept for a takeover (ServeConnection).
func ServeFD(vol *fatvol.Volume, fd int, mountpoint string, opts mountopt.Options) (*Server, error) {
	return ServeConnection(vol, Connection{FD: fd, Mountpoint: mountpoint}, opts)
}

// newServer makes a server with only the root known.
func newServer(vol *fatvol.Volume, mountpoint string, opts mountopt.Options) *Server {
	geo := vol.Geometry()
	s := &Server{
		vol:        vol,
		opts:       opts,
		mountpoint: mountpoint,
		geoCluster: int64(geo.ClusterSize),
		byPos:      map[int64]*node{},
		byIno:      map[uint64]*node{},
		handles:    map[uint64]*handle{},
		fresh:      map[*node]time.Time{},
		// Synthetic inode numbers, for entries whose position is taken by a renamed node, lie
		// above any device offset.
		nextIno: 1 << 62,
		gate:    newGate(),
		served:  make(chan struct{}),
	}
	if geo.RootEntries > 0 {
		s.fixedRoot = int64(geo.RootEntries) * 32
	}
	s.root = &node{srv: s, ino: fuse.FUSE_ROOT_ID, isDir: true, subdirs: -1}
	s.byIno[fuse.FUSE_ROOT_ID] = s.root
	return s
}

// mountOptions are go-fuse's options for the server's mount and its answer to INIT; a server
// taking a connection over must use the same, since the kernel keeps what the first negotiated.
func (s *Server) mountOptions() *fuse.MountOptions {
	mo := &fuse.MountOptions{
		FsName:        fsName(s.vol),
		Name:          "fat",
		AllowOther:    s.opts.AllowOther,
		MaxWrite:      fuse.MAX_KERNEL_WRITE,
		MaxReadAhead:  fuse.MAX_KERNEL_WRITE,
		DisableXAttrs: true, // FAT has none; vfat answers EOPNOTSUPP
		Debug:         s.opts.Debug,
		Logger:        log.New(os.Stderr, "fatfuse: ", log.LstdFlags),
		// The kernel checks permissions against the modes we report, as it does for vfat.
		Options: []string{"default_permissions", "nosuid", "nodev"},
	}
	if s.opts.ReadOnly {
		mo.Options = append(mo.Options, "ro")
	}
	mo.Options = append(mo.Options, s.opts.Kernel...)
	return mo
}

// serve mounts dir (or serves the connection of a /dev/fd/N dir) and starts go-fuse's loop.
func (s *Server) serve(dir string) (*Server, error) {
	vol, mountpoint := s.vol, s.mountpoint
	srv, err := fuse.NewServer(newRawFS(s), dir, s.mountOptions())
	if err == nil {
		s.fuse = srv
		if err = s.keepSettings(); err == nil {
			go s.loop()
			err = srv.WaitMount()
		}
	}
	if err != nil && dir == mountpoint && wentBeforeServing(err) {
		if _, merr := mountopt.MountDevice(mountpoint); merr != nil {
			// Whoever unmounted it was quicker: nothing was served.
			return nil, fmt.Errorf("mount %s on %s: %w", fsName(vol), mountpoint, ErrUnmountedBeforeServing)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mount %s on %s: %w", fsName(vol), mountpoint, err)
	}
	if err := mountopt.RaiseReadahead(mountpoint, mountopt.ReadaheadKB); err != nil && s.opts.Debug {
		log.Printf("fatfuse: %v; the kernel's read ahead stays at its default", err)
	}
	return s, nil
}

// loop runs go-fuse's request loop until the session ends.
func (s *Server) loop() {
	s.fuse.Serve()
	close(s.served)
}

// wentBeforeServing tells whether fs.Mount failed the way it does when the mount it made is
// unmounted at once: before the server read the kernel's first request (go-fuse's INIT read gets
// ENODEV), or after it, before go-fuse's poll hack opened a file in the new mount (the open finds
// the directory under it: ENOENT). The caller also checks that the mount is gone.
func wentBeforeServing(err error) bool {
	return strings.HasPrefix(err.Error(), "init: ") || errors.Is(err, syscall.ENOENT)
}

// ErrUnmountedBeforeServing: the mount was unmounted before its server could answer the kernel's
// first request, so nothing was served; what unmounted it wanted it gone.
var ErrUnmountedBeforeServing = errors.New("unmounted before it was served")

// CheckMountpoint says what is wrong with dir as a mount point, before fusermount3 would fail
// on it with no more than its exit code: it must exist and be a directory.
func CheckMountpoint(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return fmt.Errorf("mount point %s: no such directory: %w", dir, err)
	case err != nil:
		return fmt.Errorf("mount point %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("mount point %s is not a directory: %w", dir, syscall.ENOTDIR)
	}
	return nil
}

// fsName is the mount's source as /proc/mounts shows it: the device's absolute path, so it
// names the image whatever directory the mount was started in.
func fsName(vol *fatvol.Volume) string {
	p, ok := vol.Device().(interface{ Path() string })
	if !ok {
		return "fat"
	}
	if abs, err := filepath.Abs(p.Path()); err == nil {
		return abs
	}
	return p.Path()
}

// Unmount asks the kernel to unmount; it fails (EBUSY) while the mount is in use.
func (s *Server) Unmount() error {
	if err := s.fuse.Unmount(); err != nil {
		return fmt.Errorf("unmount %s: %w", s.mountpoint, err)
	}
	return nil
}

// Wait returns once the mount is gone, by Unmount or from outside, or the server paused.
func (s *Server) Wait() {
	select {
	case <-s.served:
	case <-s.gate.paused:
	}
}

// Mountpoint is where the volume is mounted.
func (s *Server) Mountpoint() string { return s.mountpoint }

// errno maps an engine error to the kernel's errno, and under errors=remount-ro turns the mount
// read-only after an I/O error, as vfat does on finding corruption.
func (s *Server) errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	e := fatvol.Errno(err)
	if e == syscall.EIO && s.opts.Errors != "continue" && !s.readOnly.Swap(true) {
		s.failure.Store(&err)
		log.Printf("fatfuse: %s: %v; refusing changes from now on (errors=remount-ro)", s.mountpoint, err)
	}
	return e
}

// Failure returns the I/O error that turned the mount read-only under errors=remount-ro, or nil.
func (s *Server) Failure() error {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// Nodes counts the files and directories the kernel knows (looked up and not yet forgotten),
// for each of which the server holds a node.
func (s *Server) Nodes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byIno)
}

// Resent counts the requests the kernel sent again after the server took the connection over:
// those the previous server had read and not answered.
func (s *Server) Resent() uint64 { return s.resent.Load() }

// writable refuses changes once the mount went read-only.
func (s *Server) writable() syscall.Errno {
	if s.opts.ReadOnly || s.readOnly.Load() {
		return syscall.EROFS
	}
	return 0
}
