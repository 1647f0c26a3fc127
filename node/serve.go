package node

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/serving"
	"github.com/csi-fat/csi-fat/node/volume"
)

// servedVolume is a staged volume, served through FUSE at the staging path by a mounter
// (remote) or, with --mounter=inprocess, by this process (local).
type servedVolume struct {
	id   string // the volume's ID, as logs and errors name it
	name string // the volume's name, its records' key
	path string // staging path
	// damage says why the volume is served read-only with file system errors; "" when it is
	// served clean.
	damage string
	local  serving.Server // the server in this process, when there is no mounter
	// held are this process's copies of the mounter's connection (takeover.go); nil when the
	// volume is served in this process or by a mounter that cannot hand its connection on.
	held *mounters.Held

	// takeover is held through a takeover or hand-over of the mounter's connection; stopping
	// the volume waits for it.
	takeover sync.Mutex
	mu       sync.Mutex        // guards what follows
	remote   *mounters.Mounter // the mounter serving the volume, or nil; a takeover replaces it
	stopping bool              // unstaging: the mounter's end is no death
	givenUp  string            // why the connection was given up (aborted); "" while served
	ends     []time.Time       // when its mounters died or failed to take over, lately
	// lost says, until lostUntil, that an earlier connection of the volume was given up, for
	// its condition.
	lost      string
	lostUntil time.Time
}

// mounter is the volume's mounter now, nil when it is served in this process.
func (sv *servedVolume) mounter() *mounters.Mounter {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.remote
}

// unmountWait bounds how long unstaging waits for the kernel to end the FUSE session after a
// successful unmount.
const unmountWait = 10 * time.Second

// serveVolume serves rec's file system on devPath at the staging path in this process. The
// device is claimed (blockdev.Exclusive, or ExclusiveReadOnly for a read-only staging: a writer
// under a served volume would corrupt what it serves) until the volume is closed; a device
// another writer holds fails with an error matching blockdev.ErrInUse (see claimCode).
func (m *Manager) serveVolume(rec volume.Record, devPath, stagingPath string, opts mountopt.Options) (*servedVolume, error) {
	local, err := m.cfg.InProcess.Serve(m.stagingOpener(rec, devPath), serving.Args{
		ID: rec.ID, DevicePath: devPath, Partition: rec.Partition, StagingPath: stagingPath,
		Claim: stagingClaim(opts.ReadOnly), Options: opts, Mode: rec.Params.Mode, CacheBytes: rec.Params.CacheBytes,
	})
	if err != nil {
		return nil, err
	}
	return &servedVolume{id: rec.ID, name: rec.Name, path: stagingPath, local: local}, nil
}

// opener opens a volume's device for staging with a claim (Manager.stagingOpener).
type opener func(blockdev.Claim) (*blockdev.File, error)

// stagingOpener opens the volume's device with the claim asked for; when that fails because
// the device is held and the volume is one partition of a stick another volume of which is
// staged, the holder is that volume's server, whose claim on the whole device keeps the host off
// every partition: this one is then opened beside it (blockdev.Beside, or Shared to read only),
// each server writing only inside its own partition's window.
func (m *Manager) stagingOpener(rec volume.Record, devPath string) opener {
	return func(claim blockdev.Claim) (*blockdev.File, error) {
		f, err := blockdev.OpenClaimed(devPath, claim)
		if errors.Is(err, blockdev.ErrInUse) && rec.Partition != "" && m.siblingStaged(rec) {
			beside := blockdev.Beside
			if claim != blockdev.Exclusive {
				beside = blockdev.Shared
			}
			klog.V(2).InfoS("another volume on the stick is staged: opening beside its claim", "volume", rec.ID, "device", devPath)
			f, err = blockdev.OpenClaimed(devPath, beside)
		}
		return f, err
	}
}

// siblingStaged tells whether another volume on rec's device is staged.
func (m *Manager) siblingStaged(rec volume.Record) bool {
	m.store.Lock()
	defer m.store.Unlock()
	for name := range m.store.Staged {
		if v := m.store.Volumes[name]; v != nil && name != rec.Name && v.Device == rec.Device {
			return true
		}
	}
	return false
}

// stagingClaim is the claim staging takes on a volume's device.
func stagingClaim(readOnly bool) blockdev.Claim {
	if readOnly {
		return blockdev.ExclusiveReadOnly
	}
	return blockdev.Exclusive
}

// claimCode is FailedPrecondition for a medium another writer holds (it may be retried once
// that writer is done), else fallback.
func claimCode(err error, fallback codes.Code) codes.Code {
	if errors.Is(err, blockdev.ErrInUse) {
		return codes.FailedPrecondition
	}
	return fallback
}

// gone tells whether the FUSE mount has ended, e.g. unmounted from outside. A held connection
// whose mounter died lives on while a new mounter takes it over.
func (sv *servedVolume) gone() bool {
	sv.mu.Lock()
	p, givenUp, supervised := sv.remote, sv.givenUp, sv.held != nil && !sv.stopping
	sv.mu.Unlock()
	if givenUp != "" {
		return true
	}
	if p != nil {
		return !supervised && p.IsGone()
	}
	select {
	case <-sv.local.Done():
		return true
	default:
		return false
	}
}

// stop unmounts, waits for the FUSE session to end and closes the volume, which writes
// everything back and marks it clean. It fails, serving on, while the mount is busy.
func (sv *servedVolume) stop() error {
	if p := sv.mounter(); p != nil {
		return sv.stopMounter()
	}
	if err := sv.local.Unmount(); err != nil && !sv.gone() {
		return err
	}
	select {
	case <-sv.local.Done():
	case <-time.After(unmountWait):
		return fmt.Errorf("unmount %s: the FUSE session did not end within %v", sv.path, unmountWait)
	}
	return sv.local.Close()
}

// sync writes everything back to the device.
func (sv *servedVolume) sync() error {
	if p := sv.mounter(); p != nil {
		return p.Sync()
	}
	return sv.local.Sync()
}

// health is what a volume's condition is judged by.
type health struct {
	fence, damage, failure string // the engine's fence and damage, the mount's failure
	ioErrors               int64
	lastIOError            string
	gone                   string // why nothing serves the mount any more; "" while served
	lost                   string // an earlier connection was given up lately (takeover.go)
	checkDamage            string // why the check before serving left it read-only
	device                 protocol.Device
	dirty                  int64
	stats                  *protocol.Stats
	statsErr               error
}

// health reads the volume's state, with its statfs figures (and file counts with files) when
// stats is set.
func (sv *servedVolume) health(stats, files bool) health {
	if sv.local != nil {
		var s protocol.Status
		sv.local.Status(&s, stats, files)
		return healthOf(&s, sv.damage)
	}
	sv.mu.Lock()
	p, givenUp, held, lost := sv.remote, sv.givenUp, sv.held != nil, sv.lost
	if time.Now().After(sv.lostUntil) {
		lost = ""
	}
	sv.mu.Unlock()
	if givenUp != "" {
		return health{gone: givenUp, checkDamage: sv.damage}
	}
	s, err := p.Status(stats && files)
	if err != nil {
		if p.IsGone() || p.Settle() {
			if held {
				return health{gone: fmt.Sprintf("%s; a new mounter is taking its connection over", p.EndedWhy()), checkDamage: sv.damage}
			}
			return health{gone: fmt.Sprintf("%s; its mount is dead: the next NodePublishVolume or NodeStageVolume serves it again", p.EndedWhy()), checkDamage: sv.damage}
		}
		return health{gone: fmt.Sprintf("its mounter (%s) does not answer: %v", p, err), checkDamage: sv.damage}
	}
	h := healthOf(s, s.CheckDamage)
	h.lost = lost
	return h
}

// healthOf is the health a server's status tells; checkDamage is what the check before serving
// left.
func healthOf(s *protocol.Status, checkDamage string) health {
	h := health{fence: s.Fence, damage: s.Damage, failure: s.Failure, ioErrors: s.Device.Errors,
		lastIOError: s.Device.LastError, checkDamage: checkDamage, device: s.Device, dirty: s.DirtyBytes, stats: s.Stats}
	if !s.Serving {
		h.gone = "the FUSE mount has ended; stage the volume again"
	}
	if s.StatsError != "" {
		h.statsErr = errors.New(s.StatsError)
	}
	return h
}

// hold writes the volume back and holds every operation on it, in this process or in its
// mounter, so that its device can be copied as it is (serving.Server.Hold, mounters.Mounter.Hold).
func (sv *servedVolume) hold(limit time.Duration) (release func() (time.Duration, error), err error) {
	p := sv.mounter()
	if p == nil {
		return sv.local.Hold(limit)
	}
	return p.Hold(limit)
}

// memory is what the volume's server holds in memory; nil when its mounter is too old to say
// or does not answer.
func (sv *servedVolume) memory() *protocol.Memory {
	if sv.local != nil {
		return sv.local.Memory()
	}
	m, err := sv.mounter().Memory()
	if err != nil {
		return nil
	}
	return m
}
