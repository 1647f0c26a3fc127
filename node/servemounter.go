package node

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/serving"
	"github.com/csi-fat/csi-fat/node/volume"
)

// serveInMounter stages a volume in a mounter of its own: this process claims and opens the
// device, the mounter checks (and repairs) it, this process mounts /dev/fuse at the staging
// path with the options the check leaves, and hands the device and the FUSE descriptor to the
// mounter, which serves them. This process then closes its copies: a FUSE descriptor nobody
// serves would make applications hang instead of fail.
func (m *Manager) serveInMounter(rec volume.Record, devPath string, st *volume.StageRecord) (*servedVolume, error) {
	optString, err := serving.MountOptionString(st.MountFlags, st.MountGroup, st.ReadOnly)
	if err != nil {
		return nil, invalid("%v", err)
	}
	opts, err := mountopt.ParseOptions(optString)
	if err != nil {
		return nil, invalid("%v", err)
	}
	dev, err := m.stagingOpener(rec, devPath)(stagingClaim(opts.ReadOnly))
	if err != nil {
		return nil, status.Errorf(claimCode(err, codes.Internal), "volume %s: open %s: %v", rec.ID, devPath, err)
	}
	defer dev.Close()
	p, err := m.launcher.Start(rec)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", rec.ID, err)
	}
	fail := func(code codes.Code, format string, args ...any) (*servedVolume, error) {
		p.Kill()
		return nil, status.Errorf(code, format, args...)
	}
	devFD := int(dev.OSFile().Fd())
	resp, err := p.Call(&protocol.Request{Op: protocol.OpCheck, Check: m.checkArgs(rec, st.ReadOnly)}, m.cfg.Mounter.CheckLimit(), devFD)
	if err != nil {
		var re *protocol.RemoteError
		if !errors.As(err, &re) {
			// It died or hung: the medium made the checker crash or loop.
			if !p.Settle() {
				p.Kill()
			}
			err = fmt.Errorf("%v (%s)", err, p.EndedWhy())
		}
		return fail(mounters.StagingCode(err), "volume %s: checking the file system on %s: %v", rec.ID, devPath, err)
	}
	forceReadOnly, damage, err := serving.JudgeCheck(rec, resp.Check, st.ReadOnly)
	if err != nil {
		p.Kill()
		return nil, err
	}
	if forceReadOnly && !opts.ReadOnly {
		optString += ",ro"
		if opts, err = mountopt.ParseOptions(optString); err != nil {
			return fail(codes.InvalidArgument, "%v", err)
		}
	}
	fuseFile, err := hostmount.MountFUSE(devPath, st.Path, opts)
	if err != nil {
		return fail(codes.Internal, "volume %s: %v", rec.ID, err)
	}
	defer fuseFile.Close()
	args := m.serveArgs(rec, st.Path, devPath, optString, damage)
	var direct *os.File
	// The mounter may not open the device: it gets the twin for direct reads and writes from
	// here (for reads alone when the volume is served read-only).
	if twin, err := blockdev.OpenDirectTwin(dev.OSFile(), !opts.ReadOnly); err == nil {
		defer twin.Close()
		args.Direct, direct = true, twin
	} else {
		klog.V(2).InfoS("large reads and writes go through the page cache", "volume", rec.ID, "reason", err)
	}
	// This process keeps copies of the connection and the device, so that the mount outlives
	// the mounter and a new one can take it over (takeover.go).
	held, err := holdConnection(rec.ID, fuseFile, dev.OSFile(), direct)
	if err != nil {
		unix.Unmount(st.Path, unix.MNT_DETACH)
		return fail(codes.Internal, "volume %s: %v", rec.ID, err)
	}
	args.State = true
	_, err = p.Call(&protocol.Request{Op: protocol.OpServe, Serve: args}, mounters.ServeTimeout, held.FDs()...)
	if err != nil {
		held.Close()
		unix.Unmount(st.Path, unix.MNT_DETACH)
		var re *protocol.RemoteError
		if !errors.As(err, &re) && p.Settle() {
			err = fmt.Errorf("%v (%s)", err, p.EndedWhy())
		}
		return fail(mounters.StagingCode(err), "volume %s: serve at %s: %v", rec.ID, st.Path, err)
	}
	// The session is up (the mounter answers once the kernel's INIT is answered, which would
	// have lowered it again): the read-ahead the unprivileged mounter cannot raise, the plugin
	// raises, without a request to the mount.
	if err := mountopt.RaiseReadahead(st.Path, mountopt.ReadaheadKB); err != nil {
		klog.V(2).InfoS("the mount's read-ahead stays at the kernel's default", "volume", rec.ID, "reason", err)
	}
	st.Mounter = p.Record()
	return &servedVolume{id: rec.ID, name: rec.Name, path: st.Path, remote: p, damage: damage, held: held}, nil
}

// checkArgs is how a mounter checks the volume before serving it.
func (m *Manager) checkArgs(rec volume.Record, readOnly bool) *protocol.CheckArgs {
	return &protocol.CheckArgs{Repair: serving.Repairs(rec, readOnly), Partition: rec.Partition, MemoryLimit: m.launcher.MemoryBound(rec)}
}

// serveArgs is how a mounter serves the volume at the staging path, with the mount options
// optString and the damage the check left; the descriptors' flags are the caller's.
func (m *Manager) serveArgs(rec volume.Record, staging, devPath, optString, damage string) *protocol.ServeArgs {
	return &protocol.ServeArgs{
		Options: mounters.ServeOptions(optString), Mode: rec.Params.Mode, CacheBytes: rec.Params.CacheBytes, Source: devPath, Mountpoint: staging,
		Damage: damage, Checked: true, Partition: rec.Partition, MemoryLimit: m.launcher.MemoryBound(rec),
	}
}

// holdConnection makes this process's copies of a served volume's FUSE descriptor, device and
// twin (nil when there is none), and its state descriptor.
func holdConnection(id string, fuse, dev, direct *os.File) (*mounters.Held, error) {
	h := &mounters.Held{}
	var err error
	if h.State, err = mounters.NewState(id); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		from *os.File
		to   **os.File
	}{{fuse, &h.FUSE}, {dev, &h.Device}, {direct, &h.Direct}} {
		if c.from == nil {
			continue
		}
		if *c.to, err = mounters.Dup(c.from); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

func (m *Manager) checkAdoptable(d media.Device, partition string) (string, error) {
	dev, err := blockdev.OpenClaimed(d.Path, blockdev.ExclusiveReadOnly)
	if errors.Is(err, blockdev.ErrInUse) && partition != "" && m.stagedOn(d.ID) {
		// A volume on another partition of the stick is staged and holds it O_EXCL, which keeps
		// the host's mounts and other claims off every partition: this one is read beside it,
		// without a claim of its own (the staged volume writes only inside its partition).
		dev, err = blockdev.OpenClaimed(d.Path, blockdev.Shared)
	}
	if err != nil {
		return "", err
	}
	defer dev.Close()
	var res *protocol.CheckResult
	if m.cfg.Mounter.OutOfProcess() {
		res, err = m.checkInMounter("usb-adopt:"+d.ID, dev.OSFile(), protocol.CheckArgs{Walk: true, Partition: partition})
	} else {
		res, err = m.cfg.InProcess.Check(dev, partition, false, true)
	}
	if err != nil {
		return "", fmt.Errorf("check %s: %w", d.Path, err)
	}
	if !res.Clean {
		return "", fmt.Errorf("check %s: the file system needs repair: %s", d.Path, serving.ListProblems(res.Left, res.Total))
	}
	return res.Label, nil
}

// adoptMounter takes over the mounter an earlier plugin process started for a staged volume,
// if it is alive and serving at the staging path.
func (m *Manager) adoptMounter(rec volume.Record, st *volume.StageRecord) (*servedVolume, error) {
	p, s, err := m.launcher.Adopt(rec, st)
	if err != nil {
		return nil, err
	}
	sv := &servedVolume{id: rec.ID, name: rec.Name, path: st.Path, remote: p, damage: s.CheckDamage}
	m.holdAdopted(sv)
	return sv, nil
}

// stagedOn tells whether a volume on the device (any of its partitions) is staged.
func (m *Manager) stagedOn(device string) bool {
	m.store.Lock()
	defer m.store.Unlock()
	for name := range m.store.Staged {
		if v := m.store.Volumes[name]; v != nil && v.Device == device {
			return true
		}
	}
	return false
}
