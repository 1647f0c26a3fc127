package mediapool

import (
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Capacity is the largest volume a CreateVolume with these parameters could make on the
// free sticks: adopting, the largest free FAT partition (or superfloppy) the patterns and the
// partition parameter select; else the largest stick no volume holds any of that is blank or
// holds FAT (without wipe=true), less the first MiB with layout=mbr. Sticks are looked at
// (prober.Look, a few KiB of each) largest first.
func (pool *Pool) Capacity(free []media.Device, claims map[string]*Claims, params volume.Params) int64 {
	var best int64
	for i := len(free) - 1; i >= 0; i-- {
		d := free[i]
		if media.Mismatch(params.Selection, d) != "" {
			continue
		}
		if !params.Adopt {
			if claims[d.ID] != nil {
				continue
			}
			if params.Wipe {
				return formattedSize(d.Size, params)
			}
			if state, _, _ := pool.ProbeMedium(d); state == media.StateFAT || state == media.StateBlank {
				return formattedSize(d.Size, params)
			}
			continue
		}
		if d.Size <= best {
			break // a partition is no larger than its device
		}
		probe, err := pool.probeDevice(d)
		if err != nil {
			continue
		}
		if !probe.Partitioned() {
			if probe.Usable && claims[d.ID] == nil && params.Partition == "" {
				best = max(best, d.Size)
			}
			continue
		}
		for _, p := range probe.FATPartitions {
			if claims[d.ID].partitionVolume(p) == "" && volume.PartitionMismatch(params.Partition, p) == "" {
				best = max(best, p.Size)
			}
		}
	}
	return best
}
