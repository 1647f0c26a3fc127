package mediapool

import (
	"fmt"
	"sort"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/node/volume"
)

// One volume per FAT partition: a removable medium with several FAT partitions (an MBR or a GPT)
// offers each as a volume of its own. A volume that holds one partition records it in
// volume.Record.Partition by its identity on the medium, layout.Partition.ID: the unique GUID of
// a GPT partition (it survives a re-numbering of the table), the number of an MBR partition (an
// MBR has no other). A record without a partition claims the whole medium: a superfloppy, a stick
// the driver formatted (a superfloppy, or layout=mbr's one partition), or a partitioned stick
// adopted before partitions were volumes of their own, served in its first FAT partition.
//
// Claims: a medium claimed whole takes no other volume; a medium one of whose partitions is
// claimed is never formatted nor wiped whole, and each partition is claimed once.

// Claims are the volumes that hold a medium: the whole of it, or some of its partitions.
type Claims struct {
	Whole      string            // the volume that claims the whole medium, or ""
	Partitions map[string]string // partition ID -> volume ID
}

// claimedMedia lists the claims of every medium a volume holds, by device ID.
func (pool *Pool) claimedMedia() map[string]*Claims {
	out := map[string]*Claims{}
	for _, v := range pool.volumes() {
		if v.Device == "" {
			continue
		}
		c := out[v.Device]
		if c == nil {
			c = &Claims{Partitions: map[string]string{}}
			out[v.Device] = c
		}
		if v.Partition == "" {
			c.Whole = v.ID
		} else {
			c.Partitions[strings.ToUpper(v.Partition)] = v.ID
		}
	}
	return out
}

// partitionVolume is the volume that claims partition p, or "".
func (c *Claims) partitionVolume(p layout.Partition) string {
	if c == nil {
		return ""
	}
	return c.Partitions[strings.ToUpper(p.ID())]
}

// Volumes lists the volumes that hold part of the medium, for messages.
func (c *Claims) Volumes() string {
	var vs []string
	for id, v := range c.Partitions {
		vs = append(vs, fmt.Sprintf("partition %s by %s", id, v))
	}
	sort.Strings(vs)
	return strings.Join(vs, ", ")
}

// WipePartition leaves a fresh empty file system in the partition id of the device at path, and
// writes nothing outside it: the table, its entry (the type byte included) and the other
// partitions stay as they are. The device is claimed (O_EXCL) from the look at its table to the
// end of the format.
func (pool *Pool) WipePartition(path, id string, params volume.Params) error {
	dev, err := blockdev.Open(path, false)
	if err != nil {
		return err
	}
	defer dev.Close()
	defer pool.prober.Forget(path)
	probe, err := pool.prober.ForFormat(dev)
	if err != nil {
		return err
	}
	p, ok := probe.Partition(id)
	if !ok {
		return fmt.Errorf("partition %s: no such partition now: the device holds %s", id, probeSummary(probe))
	}
	ss := dev.LogicalBlockSize()
	opts, err := params.MkfsOptions(ss)
	if err != nil {
		return err
	}
	if p.Start/int64(ss) > 0xFFFFFFFF {
		return fmt.Errorf("%s starts past what a boot sector's hidden sectors can count", p)
	}
	opts.HiddenSectors, opts.MBR = uint32(p.Start/int64(ss)), false
	w, err := blockdev.NewWindow(dev, p.Start, p.Size)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if _, err := mkfs.Format(w, opts); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return dev.Flush()
}
