package node

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatfuse"
	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/mounter"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/volume"
)

// servedVolume is a staged volume: the engine open on its device, served through FUSE at the
// staging path by this process.
type servedVolume struct {
	id   string // the volume's ID, as logs and errors name it
	path string // staging path
	dev  *meteredDevice
	vol  *fatvol.Volume
	srv  *fatfuse.Server
	done chan struct{} // closed when the FUSE mount is gone
	// damage says why the volume is served read-only with file system errors; "" when it is
	// served clean.
	damage string
	// remote is the mounter process serving the volume; dev, vol, srv and done are nil then.
	remote *mounterProc
}

// unmountWait bounds how long unstaging waits for the kernel to end the FUSE session after a
// successful unmount.
const unmountWait = 10 * time.Second

// mountOptions builds the FUSE mount options for staging: the StorageClass's mount options,
// then what the driver decides. A mount group (the pod's fsGroup) becomes the owner group of
// every file, since FAT records no owners, and unless the mount options set masks the group may
// write, as Kubernetes expects of an fsGroup volume. allow_other is always on: pods run as
// other users than the driver.
func mountOptions(flags []string, group string, readOnly bool) (mountopt.Options, error) {
	s, err := mountOptionString(flags, group, readOnly)
	if err != nil {
		return mountopt.Options{}, err
	}
	return mountopt.ParseOptions(s)
}

// mountOptionString is mountOptions as a -o string, as a mounter process is handed it.
func mountOptionString(flags []string, group string, readOnly bool) (string, error) {
	var opts []string
	masks := false
	for _, f := range flags {
		for _, o := range strings.Split(f, ",") {
			o = strings.TrimSpace(o)
			if o == "" {
				continue
			}
			key, _, _ := strings.Cut(o, "=")
			if key == "umask" || key == "dmask" || key == "fmask" {
				masks = true
			}
			opts = append(opts, o)
		}
	}
	if group != "" {
		gid, err := strconv.ParseUint(group, 10, 32)
		if err != nil {
			return "", fmt.Errorf("volume mount group %q is not a numeric group ID", group)
		}
		opts = append(opts, "gid="+strconv.FormatUint(gid, 10))
		if !masks {
			opts = append(opts, "umask=002")
		}
	}
	opts = append(opts, "allow_other")
	if readOnly {
		opts = append(opts, "ro")
	}
	return strings.Join(opts, ","), nil
}

// volumeOptions are the engine's options for a write mode and mount options.
func volumeOptions(opts mountopt.Options, mode string, cacheBytes int64) fatvol.Options {
	vo := fatfuse.VolumeOptions(opts)
	vo.CacheBytes = cacheBytes
	vo.Flush = mode == volume.ModeFlush || opts.Flush
	vo.Sync = mode == volume.ModeSync || opts.Sync
	vo.Logger = engineLogger()
	return vo
}

// engineLogger sends the engine's log to klog.
func engineLogger() *slog.Logger { return slog.New(logr.ToSlogHandler(klog.Background())) }

// serveVolume opens the device at devicePath and serves the file system in it (in the partition
// that partition names, see volume.Record.Partition) at stagingPath. The device is
// claimed (blockdev.Exclusive, or ExclusiveReadOnly for a read-only staging: a writer under a
// served volume would corrupt what it serves) until the volume is closed; a device another
// writer holds fails with an error matching blockdev.ErrInUse (see claimCode).
func serveVolume(open opener, id, devicePath, partition, stagingPath string, opts mountopt.Options, mode string, cacheBytes int64) (*servedVolume, error) {
	file, err := open(stagingClaim(opts.ReadOnly))
	if err != nil {
		return nil, err
	}
	if err := file.OpenDirect(); err != nil {
		klog.V(2).InfoS("large reads and writes go through the page cache", "volume", id, "reason", err)
	}
	// The file system of a superfloppy is the whole device; a partitioned stick's is the
	// partition named (or its first FAT partition), served through a window that bounds every
	// write.
	fsDev, _, err := layout.Open(file, partition)
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("volume %s on %s: %w", id, devicePath, err)
	}
	dev := newMeteredDevice(fsDev, devicePath)
	vo := volumeOptions(opts, mode, cacheBytes)
	// NodeStageVolume checked the volume (and repaired it, or serves it read-only) just before:
	// a clean unmount may mark it clean.
	vo.Checked = true
	vol, err := fatvol.Open(dev, vo)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("open volume %s on %s: %w", id, devicePath, err)
	}
	srv, err := fatfuse.Mount(vol, stagingPath, opts)
	if err != nil {
		if cerr := vol.Close(); cerr != nil {
			klog.ErrorS(cerr, "closing volume after a failed mount", "volume", id)
		}
		return nil, err
	}
	sv := &servedVolume{id: id, path: stagingPath, dev: dev, vol: vol, srv: srv, done: make(chan struct{})}
	go func() {
		srv.Wait()
		close(sv.done)
	}()
	return sv, nil
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
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.state.Staged {
		if v := m.state.Volumes[name]; v != nil && name != rec.Name && v.Device == rec.Device {
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

// gone tells whether the FUSE mount has ended, e.g. unmounted from outside.
func (sv *servedVolume) gone() bool {
	if sv.remote != nil {
		return sv.remote.isGone()
	}
	select {
	case <-sv.done:
		return true
	default:
		return false
	}
}

// stop unmounts, waits for the FUSE session to end and closes the volume, which writes
// everything back and marks it clean. It fails, serving on, while the mount is busy.
func (sv *servedVolume) stop() error {
	if sv.remote != nil {
		return sv.stopRemote()
	}
	if err := sv.srv.Unmount(); err != nil && !sv.gone() {
		return err
	}
	select {
	case <-sv.done:
	case <-time.After(unmountWait):
		return fmt.Errorf("unmount %s: the FUSE session did not end within %v", sv.path, unmountWait)
	}
	if err := sv.vol.Close(); err != nil {
		return fmt.Errorf("write back volume %s: %w", sv.id, err)
	}
	return nil
}

// sync writes everything back to the device.
func (sv *servedVolume) sync() error {
	if sv.remote != nil {
		return sv.remote.sync()
	}
	return sv.vol.Sync()
}

// health is what a volume's condition is judged by.
type health struct {
	fence, damage, failure string // the engine's fence and damage, the mount's failure
	ioErrors               int64
	lastIOError            string
	gone                   string // why nothing serves the mount any more; "" while served
	checkDamage            string // why the check before serving left it read-only
	device                 protocol.Device
	dirty                  int64
	stats                  *protocol.Stats
	statsErr               error
}

// health reads the volume's state, with its statfs figures (and file counts with files) when
// stats is set.
func (sv *servedVolume) health(stats, files bool) health {
	if sv.remote != nil {
		s, err := sv.remote.status(stats && files)
		if err != nil {
			if sv.remote.isGone() || sv.remote.settle() {
				return health{gone: fmt.Sprintf("%s; its mount is dead: the next NodePublishVolume or NodeStageVolume serves it again", sv.remote.endedWhy()), checkDamage: sv.damage}
			}
			return health{gone: fmt.Sprintf("its mounter (%s) does not answer: %v", sv.remote, err), checkDamage: sv.damage}
		}
		h := health{fence: s.Fence, damage: s.Damage, failure: s.Failure, ioErrors: s.Device.Errors,
			lastIOError: s.Device.LastError, checkDamage: s.CheckDamage, device: s.Device, dirty: s.DirtyBytes, stats: s.Stats}
		if !s.Serving {
			h.gone = "the FUSE mount has ended; stage the volume again"
		}
		if s.StatsError != "" {
			h.statsErr = errors.New(s.StatsError)
		}
		return h
	}
	h := health{checkDamage: sv.damage}
	if err := sv.vol.Err(); err != nil {
		h.fence = err.Error()
	}
	if err := sv.vol.Damage(); err != nil {
		h.damage = err.Error()
	}
	if err := sv.srv.Failure(); err != nil {
		h.failure = err.Error()
	}
	n, last := sv.dev.ioErrors()
	h.ioErrors = n
	if last != nil {
		h.lastIOError = last.Error()
	}
	if sv.gone() {
		h.gone = "the FUSE mount has ended; stage the volume again"
	}
	s := sv.dev.Stats()
	h.device = protocol.Device{Reads: s.Reads, Writes: s.Writes, BytesRead: s.BytesRead, BytesWritten: s.BytesWritten, Flushes: s.Flushes, Errors: n}
	h.dirty = sv.vol.DirtyBytes()
	if stats {
		h.stats, h.statsErr = mounter.StatsOf(sv.vol, files)
	}
	return h
}
