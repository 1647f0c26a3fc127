package inprocess

import (
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatfuse"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/mounter"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/serving"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Engine is serving.Engine: the engine in this process.
type Engine struct{}

var _ serving.Engine = Engine{}

// Check checks the file system in partition of dev as a mounter does (mounter.Check).
func (Engine) Check(dev blockdev.Device, partition string, repair, walk bool) (*protocol.CheckResult, error) {
	return mounter.Check(dev, partition, repair, walk, 0) // the plugin's process has no bound of its own
}

// ReadMedium names what the medium holds and lists the partitions of its table that hold FAT
// (a FAT type and a FAT boot sector), as the prober process does (mounter.ProbeMain).
func (Engine) ReadMedium(m layout.Medium) (*layout.Report, []layout.Partition, error) {
	r, err := layout.Probe(m)
	if err != nil {
		return nil, nil, err
	}
	if r.Layout == nil || (r.Layout.Kind != layout.MBR && r.Layout.Kind != layout.GPT) {
		return r, nil, nil
	}
	var fat []layout.Partition
	for _, p := range r.Layout.Partitions {
		if !p.IsFATType() {
			continue
		}
		if sig, ok, err := layout.ProbeAt(m, p.Start, p.Size); err == nil && ok && sig.Type == layout.TypeFAT {
			fat = append(fat, p)
		}
	}
	return r, fat, nil
}

// Serve opens the volume's device with open and serves the file system in it (in the partition
// a.Partition names) at a.StagingPath. The claim (a.Claim) lasts until the volume is closed.
func (Engine) Serve(open func(blockdev.Claim) (*blockdev.File, error), a serving.Args) (serving.Server, error) {
	file, err := open(a.Claim)
	if err != nil {
		return nil, err
	}
	if err := file.OpenDirect(); err != nil {
		klog.V(2).InfoS("large reads and writes go through the page cache", "volume", a.ID, "reason", err)
	}
	// The file system of a superfloppy is the whole device; a partitioned stick's is the
	// partition named (or its first FAT partition), served through a window that bounds every
	// write.
	fsDev, _, err := layout.Open(file, a.Partition)
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("volume %s on %s: %w", a.ID, a.DevicePath, err)
	}
	dev := mounter.NewMeteredDevice(fsDev, a.DevicePath)
	vol, err := fatvol.Open(dev, volumeOptions(a))
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("open volume %s on %s: %w", a.ID, a.DevicePath, err)
	}
	srv, err := fatfuse.Mount(vol, a.StagingPath, a.Options)
	if err != nil {
		if cerr := vol.Close(); cerr != nil {
			klog.ErrorS(cerr, "closing volume after a failed mount", "volume", a.ID)
		}
		return nil, err
	}
	s := &server{id: a.ID, dev: dev, vol: vol, srv: srv, done: make(chan struct{})}
	go func() {
		srv.Wait()
		close(s.done)
	}()
	return s, nil
}

// volumeOptions are the engine's options for a staging's write mode and mount options.
func volumeOptions(a serving.Args) fatvol.Options {
	vo := fatfuse.VolumeOptions(a.Options)
	vo.CacheBytes = a.CacheBytes
	vo.Flush = a.Mode == volume.ModeFlush || a.Options.Flush
	vo.Sync = a.Mode == volume.ModeSync || a.Options.Sync
	vo.Logger = slog.New(logr.ToSlogHandler(klog.Background()))
	// NodeStageVolume checked the volume (and repaired it, or serves it read-only) just before:
	// a clean unmount may mark it clean.
	vo.Checked = true
	return vo
}
