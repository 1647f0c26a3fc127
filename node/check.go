package node

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/serving"
	"github.com/csi-fat/csi-fat/node/volume"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

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
		klog.InfoS("the copy of a volume has file system errors that were not repaired, as the volume has", "volume", rec.ID, "errors", serving.ListProblems(res.Left, res.Total))
	}
	return nil
}

// checkInMounter checks the file system on f in a short-lived mounter of its own, named name,
// as args say (repair, walk), so that this process never parses what a medium holds.
func (m *Manager) checkInMounter(name string, f *os.File, args protocol.CheckArgs) (*protocol.CheckResult, error) {
	rec := volume.Record{ID: name, Name: name}
	args.MemoryLimit = m.launcher.MemoryBound(rec)
	p, err := m.launcher.Start(rec)
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

// copySources is what node/snapshots needs of the Manager's volumes.
type copySources struct{ m *Manager }

func (c copySources) DevicePath(rec volume.Record) (string, error) { return c.m.devicePath(rec) }

func (c copySources) CheckCopy(rec volume.Record, f *os.File) error { return c.m.checkCopy(rec, f) }

func (c copySources) ImageCapacity() (int64, error) { return c.m.imageCapacity() }

func (c copySources) Served(name string) func(time.Duration) (func() (time.Duration, error), error) {
	c.m.store.Lock()
	sv := c.m.served[name]
	c.m.store.Unlock()
	if sv == nil || sv.gone() {
		return nil
	}
	return sv.hold
}
