package mounter

import (
	"errors"
	"io"
	iofs "io/fs"
	"sync"

	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// maxProblems bounds the problems a CheckResult lists.
const maxProblems = 20

// Check checks the file system on the medium (the whole of a superfloppy, else the partition
// that partition names, or with "" its first FAT partition), repairing what fsck.Repair repairs safely when repair
// is set, as the driver does before serving. With walk it also opens the volume read-only and
// reads every directory, as adopting a device needs. maxMemory bounds what the check holds
// (fsck.Options.MaxMemory; 0: no bound). An error means no FAT file system the checker can read
// (or a device that fails), or one whose FAT alone exceeds maxMemory (fsck.ErrMemory).
func Check(medium blockdev.Device, partition string, repair, walk bool, maxMemory int64) (*protocol.CheckResult, error) {
	// A superfloppy is checked whole, a partitioned stick in the partition named, through a
	// window that bounds every read and write.
	dev, _, err := layout.Open(medium, partition)
	if err != nil {
		return nil, err
	}
	var res *fsck.RepairResult
	opts := fsck.Options{MaxMemory: maxMemory}
	if repair {
		res, err = fsck.RepairWith(dev, opts)
	} else {
		var rep *fsck.Report
		rep, err = fsck.CheckWith(dev, opts)
		res = &fsck.RepairResult{Before: rep}
	}
	if err != nil {
		return nil, err
	}
	out := &protocol.CheckResult{Clean: res.Clean()}
	for _, p := range res.Repaired {
		out.Repaired = append(out.Repaired, p.String())
	}
	var left []fsck.Problem
	switch {
	case res.After != nil:
		left = res.After.Errors() // repaired, yet errors remain
	case len(res.Unrepairable) > 0:
		left = res.Unrepairable
	case !res.Clean():
		left = res.Before.Errors() // not repaired: only checking
	}
	out.Total = len(left)
	for i, p := range left {
		if i == maxProblems {
			break
		}
		out.Left = append(out.Left, p.String())
	}
	out.Unrepairable = res.After != nil || len(res.Before.Unrepairable()) > 0
	if walk && out.Clean {
		vol, err := fatvol.Open(dev, fatvol.Options{ReadOnly: true})
		if err != nil {
			return nil, err
		}
		walkErr := iofs.WalkDir(vol, ".", func(_ string, _ iofs.DirEntry, err error) error { return err })
		out.Label = vol.Label()
		if err := vol.Close(); walkErr == nil {
			walkErr = err
		}
		if walkErr != nil {
			return nil, walkErr
		}
	}
	return out, nil
}

// StatsOf measures a served volume: bytes in clusters and, with files, "inodes" as the mount's
// statfs reports them (fatvol.Volume.Files).
func StatsOf(vol *fatvol.Volume, files bool) (*protocol.Stats, error) {
	st, err := vol.StatFS()
	if err != nil {
		return nil, err
	}
	cluster := int64(st.ClusterSize)
	out := &protocol.Stats{
		TotalBytes:     int64(st.TotalClusters) * cluster,
		AvailableBytes: int64(st.FreeClusters) * cluster,
		UsedBytes:      int64(st.UsedClusters) * cluster,
	}
	if files {
		f, err := vol.Files()
		if err != nil {
			return nil, err
		}
		out.TotalFiles, out.FreeFiles, out.UsedFiles, out.Files = f.Total, f.Free, f.Used, true
	}
	return out, nil
}

// MeteredDevice counts a served device's requests and notes its I/O errors, and names it by
// the path the plugin opened it at (fatfuse uses Path as the file system's source).
type MeteredDevice struct {
	*blockdev.Counting
	path string

	mu      sync.Mutex
	errors  int64
	lastErr error
}

// NewMeteredDevice meters d, named path.
func NewMeteredDevice(d blockdev.Device, path string) *MeteredDevice {
	return &MeteredDevice{Counting: blockdev.NewCounting(d), path: path}
}

func (d *MeteredDevice) Path() string { return d.path }

func (d *MeteredDevice) note(err error) {
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	d.mu.Lock()
	d.errors++
	d.lastErr = err
	d.mu.Unlock()
}

func (d *MeteredDevice) Counters() protocol.Device {
	s := d.Stats()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := protocol.Device{Reads: s.Reads, Writes: s.Writes, BytesRead: s.BytesRead,
		BytesWritten: s.BytesWritten, Flushes: s.Flushes, Errors: d.errors}
	if d.lastErr != nil {
		out.LastError = d.lastErr.Error()
	}
	return out
}

func (d *MeteredDevice) ReadAt(p []byte, off int64) (int, error) {
	n, err := d.Counting.ReadAt(p, off)
	d.note(err)
	return n, err
}

func (d *MeteredDevice) WriteAt(p []byte, off int64) (int, error) {
	n, err := d.Counting.WriteAt(p, off)
	d.note(err)
	return n, err
}

func (d *MeteredDevice) WritevAt(bufs [][]byte, off int64) (int, error) {
	n, err := d.Counting.WritevAt(bufs, off)
	d.note(err)
	return n, err
}

func (d *MeteredDevice) Flush() error {
	err := d.Counting.Flush()
	d.note(err)
	return err
}
