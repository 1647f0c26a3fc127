package prober

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/serving"
)

// Result is what a free medium holds, as the pool sees it: layout.Probe's report, and the
// partitions of its table that hold FAT (a FAT type and a FAT boot sector), each a volume.
type Result struct {
	*layout.Report
	FATPartitions []layout.Partition
}

// Partitioned tells whether the medium's FAT file systems are in partitions of a table.
func (r *Result) Partitioned() bool {
	return r.Layout != nil && (r.Layout.Kind == layout.MBR || r.Layout.Kind == layout.GPT)
}

// Partition finds a partition of the table by its ID (layout.Partition.ID).
func (r *Result) Partition(id string) (layout.Partition, bool) {
	if !r.Partitioned() {
		return layout.Partition{}, false
	}
	return r.Layout.Partition(id)
}

// Prober is how the removable-media pool looks at what media hold. Every look at a medium's
// table (a device listed, a new one formatted, a partition claimed or wiped) goes through it.
type Prober struct {
	cfg   mounters.Config
	here  serving.Engine // reads media in this process, in the in-process mode alone
	cache cache
}

// New is the prober of cfg's mode: prober processes outside the in-process mode, else here,
// the engine in this process.
func New(cfg mounters.Config, here serving.Engine) *Prober {
	return &Prober{cfg: cfg, here: here}
}

// Look says what the free device d, opened read-only as f, holds: in a prober process outside
// the in-process mode (a recent look at the same medium is reused), else here.
func (p *Prober) Look(f layout.FileMedium, d media.Device) (*Result, error) {
	if !p.cfg.OutOfProcess() {
		return p.Here(f)
	}
	return p.cache.get(f.File, d, f.BlockSize, func() (*Result, error) {
		r, err := Run(p.cfg, f.File, d.Path, d.Size, f.BlockSize)
		if err != nil {
			klog.InfoS("removable medium unreadable: its probe failed", "device", d.ID, "path", d.Path, "err", err)
		}
		return r, err
	})
}

// ForFormat says what dev, claimed (O_EXCL) for a format, holds: in a prober process outside
// the in-process mode, on a read-only descriptor of the same open device (the claim stays
// here), never from what was seen before. A prober that fails leaves a report that is neither
// usable nor blank and has no table, with the reason: the device is then not written.
func (p *Prober) ForFormat(dev *blockdev.File) (*Result, error) {
	if !p.cfg.OutOfProcess() {
		return p.Here(dev)
	}
	ro, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", dev.OSFile().Fd()), os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen %s read-only for its probe: %w", dev.Path(), err)
	}
	defer ro.Close()
	r, err := Run(p.cfg, ro, dev.Path(), dev.Size(), dev.LogicalBlockSize())
	if err != nil {
		klog.InfoS("removable medium not formatted: its probe failed", "path", dev.Path(), "err", err)
		return &Result{Report: &layout.Report{Reason: fmt.Sprintf("what it holds could not be read: %v", err)}}, nil
	}
	return r, nil
}

// Forget drops what was seen on the device at path: it is being written.
func (p *Prober) Forget(path string) { p.cache.forget(path) }

// Here reads what the medium holds in this process, with the in-process engine (only with
// --mounter=inprocess); a prober process's answer is rebuilt into the same Result.
func (p *Prober) Here(med layout.Medium) (*Result, error) {
	if p.here == nil {
		return nil, errors.New("no engine in this process to read the medium with (the in-process mode needs one)")
	}
	r, fat, err := p.here.ReadMedium(med)
	if err != nil {
		return nil, err
	}
	return &Result{Report: r, FATPartitions: fat}, nil
}
