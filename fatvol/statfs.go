package fatvol

import (
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Stats is what statfs reports of a volume.
type Stats struct {
	Type          ondisk.FATType
	ClusterSize   int
	TotalClusters uint32
	FreeClusters  uint32
	UsedClusters  uint32
}

// StatFS reports the volume's size and free space in clusters.
func (v *Volume) StatFS() (Stats, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.usable(); err != nil {
		return Stats{}, err
	}
	return Stats{
		Type:          v.geo.Type,
		ClusterSize:   v.geo.ClusterSize,
		TotalClusters: v.geo.Clusters,
		FreeClusters:  v.fat.free,
		UsedClusters:  v.geo.Clusters - v.fat.free,
	}, nil
}

// Label returns the volume label: the root directory's label entry, which is what Windows and
// Linux show, else the boot sector's; "" when there is none.
func (v *Volume) Label() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.root.dir; d != nil && d.labelOff >= 0 {
		e := d.entry(d.labelOff)
		return labelString(e.Name[:])
	}
	if v.boot.BootSig == 0x29 {
		if l := labelString(v.boot.VolumeLabel[:]); l != "NO NAME" {
			return l
		}
	}
	return ""
}

func labelString(b []byte) string {
	return strings.TrimRight(string(b), " ")
}
