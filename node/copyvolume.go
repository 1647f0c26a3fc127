package node

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/volume"
)

// holdLimit bounds how long a volume in use is held for a copy: if the copy has not ended by
// then (or the plugin hangs or dies meanwhile), applications go on and the copy is void.
const holdLimit = 10 * time.Minute

// holdMargin is how long before the hold's limit a copy of a volume in use gives up, so that
// its release comes while the volume is still held.
const holdMargin = 30 * time.Second

// copied is how a copy of a volume went.
type copied struct {
	blockdev.CopyResult
	// held is how long the volume's operations were held; 0 when it was not in use.
	held time.Duration
}

// copyVolume copies the volume's device (its image, or its USB stick) into dst, an empty file in
// the image pool, and checks the copy. A staged volume is held meanwhile (servedVolume.hold): written
// back and made durable, no operation let through until the copy is made, so the copy is the
// volume of one moment with all that was written before it; a reflink makes the hold a moment,
// a sparse copy makes it last the copy. A volume that is not staged is claimed, so that no
// writer comes meanwhile. The check of the copy repairs what a copy of a volume in use holds, as
// after a crash: the dirty bit, preallocated clusters of files open for writing, clusters of
// files removed while open. budget bounds what a sparse copy may write. The caller holds the
// volume's lock.
func (m *Manager) copyVolume(rec volume.Record, dst *os.File, budget int64) (copied, error) {
	devPath, err := m.devicePath(rec)
	if err != nil {
		return copied{}, err
	}
	length, err := m.copyLength(rec)
	if err != nil {
		return copied{}, err
	}
	m.store.Lock()
	sv := m.served[rec.Name]
	m.store.Unlock()
	var out copied
	if sv != nil && !sv.gone() {
		// The server holds the claim: read beside it, through the same page cache.
		src, err := os.Open(devPath)
		if err != nil {
			return copied{}, status.Errorf(codes.Internal, "volume %s: %v", rec.ID, err)
		}
		defer src.Close()
		release, err := sv.hold(holdLimit)
		if errors.Is(err, mounters.ErrOld) {
			return copied{}, status.Errorf(codes.FailedPrecondition, "%v", err)
		}
		if err != nil {
			return copied{}, status.Errorf(codes.Unavailable, "%v", err)
		}
		res, cerr := blockdev.CopyImage(dst, src, length, blockdev.CopyOptions{Budget: budget, Deadline: time.Now().Add(holdLimit - holdMargin)})
		held, rerr := release()
		if cerr != nil {
			return copied{}, copyError("volume "+rec.ID, cerr)
		}
		if rerr != nil {
			return copied{}, status.Errorf(codes.Unavailable, "%v", rerr)
		}
		out = copied{CopyResult: res, held: held}
	} else {
		src, err := blockdev.OpenClaimed(devPath, blockdev.ExclusiveReadOnly)
		if err != nil {
			return copied{}, status.Errorf(claimCode(err, codes.Internal), "volume %s: open %s to copy it: %v", rec.ID, devPath, err)
		}
		defer src.Close()
		res, err := blockdev.CopyImage(dst, src.OSFile(), length, blockdev.CopyOptions{Budget: budget})
		if err != nil {
			return copied{}, copyError("volume "+rec.ID, err)
		}
		out = copied{CopyResult: res}
	}
	if err := m.checkCopy(rec, dst); err != nil {
		return copied{}, err
	}
	klog.InfoS("copied volume", "volume", rec.ID, "to", dst.Name(), "reflink", out.Reflinked, "written", out.Written, "held", out.held)
	return out, nil
}

// copyError is the status for a failed copy: ResourceExhausted when the pool lacks room.
func copyError(what string, err error) error {
	if errors.Is(err, blockdev.ErrBudget) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return status.Errorf(codes.ResourceExhausted, "copy %s: the image pool lacks room: %v", what, err)
	}
	return status.Errorf(codes.Internal, "copy %s: %v", what, err)
}

// checkCopy checks a fresh copy of a volume and repairs what the copy of a volume in use holds
// (as fsck.fat -a would). In process mode a mounter of its own does it, so that the plugin never
// parses a medium's structures. Errors left that are not safe to repair are logged: the copy is
// as the volume was.
func (m *Manager) checkCopy(rec volume.Record, dst *os.File) error {
	var res *protocol.CheckResult
	var err error
	if m.cfg.Mounter.OutOfProcess() {
		res, err = m.checkInMounter("copy-check:"+rec.Name, dst, protocol.CheckArgs{Repair: true})
	} else {
		// A duplicate, so that the check's claim and close leave dst as it is.
		var fd int
		fd, err = unix.FcntlInt(dst.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err == nil {
			var dev *blockdev.File
			dev, err = blockdev.FromFile(os.NewFile(uintptr(fd), dst.Name()), dst.Name(), blockdev.Exclusive)
			if err == nil {
				res, err = m.cfg.InProcess.Check(dev, "", true, false)
				if cerr := dev.Close(); err == nil && cerr != nil {
					err = cerr
				}
			}
		}
	}
	if err != nil {
		return status.Errorf(codes.Internal, "check the copy of volume %s: %v", rec.ID, err)
	}
	if len(res.Repaired) > 0 {
		klog.InfoS("repaired the copy of a volume", "volume", rec.ID, "repaired", strings.Join(res.Repaired, "; "))
	}
	if !res.Clean {
		klog.InfoS("the copy of a volume has file system errors that were not repaired, as the volume has", "volume", rec.ID, "errors", listProblems(res.Left, res.Total))
	}
	return nil
}

// checkInMounter checks the file system on f in a short-lived mounter of its own, named name,
// as args say (repair, walk), so that this process never parses what a medium holds.
func (m *Manager) checkInMounter(name string, f *os.File, args protocol.CheckArgs) (*protocol.CheckResult, error) {
	p, err := m.launcher.Start(volume.Record{ID: name, Name: name})
	if err != nil {
		return nil, err
	}
	resp, err := p.Call(&protocol.Request{Op: protocol.OpCheck, Check: &args}, m.cfg.Mounter.CheckLimit(), int(f.Fd()))
	if err == nil {
		if _, serr := p.Call(&protocol.Request{Op: protocol.OpStop}, mounters.CallTimeout); serr == nil {
			p.Settle()
		}
	}
	var re *protocol.RemoteError
	if err != nil && !errors.As(err, &re) && p.Settle() {
		err = fmt.Errorf("%v (%s)", err, p.EndedWhy())
	}
	p.Discard()
	if err != nil {
		return nil, err
	}
	return resp.Check, nil
}

// copyLength is how many bytes of a volume's device a copy takes: an image whole, a stick whole
// (its size, which is more than the volume's when its file system is in layout=mbr's partition:
// the copy keeps the table, and the image pool serves its first FAT partition). A volume in one
// partition of a stick is not copied: a copy of the whole stick would take the other volumes'
// partitions with it.
func (m *Manager) copyLength(rec volume.Record) (int64, error) {
	switch {
	case rec.Device == "":
		return rec.Size, nil
	case rec.Partition != "":
		return 0, status.Errorf(codes.FailedPrecondition, "volume %s is partition %s of removable medium %s: snapshots and clones of one partition of a stick are not supported", rec.ID, rec.Partition, rec.Device)
	case m.usb == nil:
		return 0, status.Errorf(codes.FailedPrecondition, "volume %s is on a usb device but the usb pool is not enabled", rec.ID)
	}
	d, err := m.usb.Find(rec.Device)
	if err != nil {
		return 0, status.Errorf(codes.FailedPrecondition, "volume %s: %v", rec.ID, err)
	}
	return d.Size, nil
}
