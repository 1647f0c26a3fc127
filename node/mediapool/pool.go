package mediapool

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/prober"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Free lists the devices a new volume may claim, or a partition of: allowed by the lists, not
// used by the host, not claimed whole by another volume; smallest first. claims are the
// volumes that hold partitions of them (and of other devices).
func (pool *Pool) Free() (free []media.Device, claims map[string]*Claims, skipped []string, err error) {
	devs, err := pool.cfg.Scan(true)
	if err != nil {
		return nil, nil, nil, err
	}
	claims = pool.claimedMedia()
	for _, d := range devs {
		switch {
		case claims[d.ID] != nil && claims[d.ID].Whole != "":
		case d.Busy != "":
			skipped = append(skipped, fmt.Sprintf("%s (%s): %s", d.ID, d.Kernel, d.Busy))
		default:
			free = append(free, d)
		}
	}
	return free, claims, skipped, nil
}

// Claim is what a new volume of the removable-media pool takes: a device whole (partition
// "") or one partition of it, and the volume's size, the partition's when the file system is in
// one.
type Claim struct {
	Dev       media.Device
	Partition string
	Size      int64
	Label     string // an adopted file system's label (discovery mode labels its PV with it)
}

// ClaimFor picks the smallest free device (or, adopting, the first free FAT partition of the
// smallest device) whose size lies in [required, limit] and prepares it: with adopt its file
// system is checked and kept, else the device is formatted. The caller serializes claims (node.Manager.provision), so no
// two volumes claim one device or partition.
func (pool *Pool) ClaimFor(required, limit int64, params volume.Params) (Claim, error) {
	free, claims, skipped, err := pool.Free()
	if err != nil {
		return Claim{}, status.Error(codes.Internal, err.Error())
	}
	var why []string
	fits := func(size int64) bool { return size >= required && (limit == 0 || size <= limit) }
	for _, d := range free {
		if miss := media.Mismatch(params.Selection, d); miss != "" {
			why = append(why, fmt.Sprintf("%s: %s", d.ID, miss))
			continue
		}
		if params.Adopt {
			c, reasons := pool.Adopt(d, claims[d.ID], fits, params)
			if c != nil {
				return *c, nil
			}
			why = append(why, reasons...)
			continue
		}
		if c := claims[d.ID]; c != nil {
			why = append(why, fmt.Sprintf("%s: not formatted: volumes hold its partitions (%s)", d.ID, c.Volumes()))
			continue
		}
		if size := formattedSize(d.Size, params); !fits(size) {
			why = append(why, fmt.Sprintf("%s: %d bytes", d.ID, size))
			continue
		}
		var foreign *foreignError
		part, err := pool.FormatNew(d.Path, params)
		if errors.Is(err, blockdev.ErrInUse) {
			why = append(why, fmt.Sprintf("%s: %v", d.ID, err)) // another writer has it: try the next
			continue
		} else if errors.As(err, &foreign) {
			klog.InfoS("removable medium not formatted: it holds something else than FAT", "device", d.ID, "reason", foreign.reason)
			why = append(why, fmt.Sprintf("%s: %v", d.ID, err))
			continue
		} else if err != nil {
			return Claim{}, status.Errorf(codes.Internal, "format removable medium %s (%s): %v", d.ID, d.Path, err)
		}
		// The whole device is claimed; the volume's size is its file system's: the one
		// partition's with layout=mbr.
		return Claim{Dev: d, Size: part.Size}, nil
	}
	why = append(why, skipped...)
	if len(why) == 0 {
		why = []string{"no free removable medium is attached"}
	}
	return Claim{}, status.Errorf(codes.ResourceExhausted, "%v for %d..%d bytes: %s", media.ErrNoDevice, required, limit, strings.Join(why, "; "))
}

// Adopt finds what a volume adopting a file system may take on device d: the device whole when
// it is a superfloppy (or unclaimed and holding no table: the check says what is wrong), else the
// first FAT partition that no volume claims, that the partition parameter names, whose size fits
// and whose file system is whole. It returns nil and the reasons when there is none.
func (pool *Pool) Adopt(d media.Device, claims *Claims, fits func(int64) bool, params volume.Params) (*Claim, []string) {
	probe, err := pool.probeDevice(d)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: not adoptable: %v", d.ID, err)}
	}
	var why []string
	if !probe.Partitioned() {
		switch {
		case claims != nil:
			// Volumes hold partitions of a table that is gone: leave the device alone.
			return nil, []string{fmt.Sprintf("%s: volumes hold its partitions (%s), but it has no partition table now", d.ID, claims.Volumes())}
		case params.Partition != "":
			return nil, []string{fmt.Sprintf("%s: %s=%s, but it has no partition table (%s)", d.ID, volume.ParamPartition, params.Partition, probeSummary(probe))}
		case !fits(d.Size):
			return nil, []string{fmt.Sprintf("%s: %d bytes", d.ID, d.Size)}
		}
		label, err := pool.check(d, "")
		if err != nil {
			return nil, []string{fmt.Sprintf("%s: not adoptable: %v", d.ID, err)}
		}
		if miss := params.Selection.LabelMismatch(label); miss != "" {
			return nil, []string{fmt.Sprintf("%s: %s", d.ID, miss)}
		}
		return &Claim{Dev: d, Size: d.Size, Label: label}, nil
	}
	if len(probe.FATPartitions) == 0 {
		return nil, []string{fmt.Sprintf("%s: not adoptable: %s", d.ID, probeSummary(probe))}
	}
	for _, p := range probe.FATPartitions {
		name := fmt.Sprintf("%s partition %s", d.ID, p.ID())
		if v := claims.partitionVolume(p); v != "" {
			why = append(why, fmt.Sprintf("%s: claimed by volume %s", name, v))
			continue
		}
		if miss := volume.PartitionMismatch(params.Partition, p); miss != "" {
			why = append(why, fmt.Sprintf("%s: %s", name, miss))
			continue
		}
		if !fits(p.Size) {
			why = append(why, fmt.Sprintf("%s: %d bytes", name, p.Size))
			continue
		}
		label, err := pool.check(d, p.ID())
		if err != nil {
			why = append(why, fmt.Sprintf("%s: not adoptable: %v", name, err))
			continue
		}
		if miss := params.Selection.LabelMismatch(label); miss != "" {
			why = append(why, fmt.Sprintf("%s: %s", name, miss))
			continue
		}
		return &Claim{Dev: d, Partition: p.ID(), Size: p.Size, Label: label}, nil
	}
	return nil, why
}

// probeSummary says in a few words what a medium holds.
func probeSummary(p *prober.Result) string {
	if p.Usable && p.Layout != nil {
		return p.Layout.Describe()
	}
	return p.Reason
}

// probeDevice reads what a device holds without claiming it (prober.Look).
func (pool *Pool) probeDevice(d media.Device) (*prober.Result, error) {
	f, err := openRawMedium(d)
	if err != nil {
		return nil, err
	}
	defer f.File.Close()
	return pool.prober.Look(f, d)
}

// formattedSize is the size of the file system a format with these parameters leaves on a
// device of size bytes: all of it, or with layout=mbr all but the first MiB (counted in 512-byte
// sectors: a device of larger sectors loses no more).
func formattedSize(size int64, params volume.Params) int64 {
	if params.LayoutKind() == layout.MBR {
		return max(min(size-1<<20, 0xFFFFFFFF*512), 0)
	}
	return size
}

// Format writes a fresh empty file system on the device (over the whole of it, or in an
// MBR's one partition with layout=mbr), claimed (O_EXCL) while it does.
func Format(path string, params volume.Params) error {
	dev, err := blockdev.Open(path, false)
	if err != nil {
		return err
	}
	_, err = formatAndClose(dev, params)
	return err
}

// foreignError says why a stick was not formatted for a new volume: it holds something else
// than FAT (another file system, an encrypted or LVM volume, a partition table without a FAT
// partition, content nothing recognises), which only wipe=true may destroy.
type foreignError struct{ reason string }

func (e *foreignError) Error() string {
	return fmt.Sprintf("not formatted: %s (%s=true formats it)", e.reason, volume.ParamWipe)
}

// FormatNew formats a free device for a new volume, claimed (O_EXCL) from the look at
// what it holds to the end of the format: a FAT one or a blank one, and anything with wipe=true;
// else a *foreignError and nothing written.
func (pool *Pool) FormatNew(path string, params volume.Params) (layout.Partition, error) {
	dev, err := blockdev.Open(path, false)
	if err != nil {
		return layout.Partition{}, err
	}
	defer pool.prober.Forget(path)
	if !params.Wipe {
		r, err := pool.prober.ForFormat(dev)
		if err == nil && !r.Usable && !r.Blank {
			err = &foreignError{reason: r.Reason}
		}
		if err != nil {
			dev.Close()
			return layout.Partition{}, err
		}
	}
	return formatAndClose(dev, params)
}

// formatAndClose formats dev with the StorageClass parameters (in the layout they name: the
// whole device, or one FAT partition of an MBR), then closes it. It returns where the file
// system went: the whole device (number 0), or the MBR's partition.
func formatAndClose(dev *blockdev.File, params volume.Params) (layout.Partition, error) {
	opts, err := params.MkfsOptions(dev.LogicalBlockSize())
	var part layout.Partition
	if err == nil {
		_, part, err = layout.Format(dev, params.LayoutKind(), opts)
	}
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	return part, err
}
