package ondisk

import "math"

// MaxClusters is the most data clusters a volume of type t may have: beyond it, every reader
// would take the volume for another FAT type.
func MaxClusters(t FATType) uint32 {
	switch t {
	case FAT12:
		return MaxClustersFAT12
	case FAT16:
		return MaxClustersFAT16
	default:
		return MaxClustersFAT32
	}
}

// MaxGrowSectors is the largest volume, in sectors, this layout can grow to in place: as many
// clusters as each FAT copy has entries for and the FAT type allows (and the sectors of a last
// partial cluster, which no cluster uses), within 2^32-1 sectors. The FAT's place and size cannot
// change under a mounted volume, so this is the limit of growth.
func (g *Geometry) MaxGrowSectors() int64 {
	entries := g.FATBytes() * 8 / int64(g.Type)
	clusters := min(entries-2, int64(MaxClusters(g.Type)))
	return min(g.FirstDataSector+(clusters+1)*int64(g.SectorsPerCluster)-1, math.MaxUint32)
}
