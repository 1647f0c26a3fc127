package fatvol

import (
	"fmt"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// maxRequest bounds one coalesced device write.
const maxRequest = 8 << 20

// writeback writes every dirty piece of metadata to the device, in the order that keeps the
// volume consistent if it stops part way: file data goes out before the metadata that points to
// it (data is written when it is written), then the FAT copies, then directory entries, then
// FSINFO. A crash between the FAT and the directories leaves at worst lost clusters, never an
// entry that points to clusters the FAT does not hold for it.
func (v *Volume) writeback() error {
	var fatRanges []devRange
	ss := int64(v.geo.SectorSize)
	for _, run := range v.fat.dirtyRuns() {
		buf := v.fat.raw[run.start*ss : (run.start+run.count)*ss]
		for copy := 0; copy < v.geo.NumFATs; copy++ {
			if v.geo.ActiveFAT >= 0 && copy != v.geo.ActiveFAT {
				continue
			}
			fatRanges = append(fatRanges, devRange{off: v.geo.FATOffset(copy) + run.start*ss, length: int64(len(buf)), buf: buf})
		}
	}
	if err := v.writeRanges(fatRanges); err != nil {
		return err
	}
	v.fat.clearDirty()

	var dirRanges []devRange
	for d := range v.dirtyDirs {
		dirRanges = append(dirRanges, d.dirtyRanges()...)
		delete(v.dirtyDirs, d)
	}
	if err := v.writeRanges(dirRanges); err != nil {
		return err
	}
	return v.writeFSInfo()
}

// writeFSInfo brings FAT32's FSINFO sector up to date when its free count or hint changed.
func (v *Volume) writeFSInfo() error {
	if v.geo.Type != ondisk.FAT32 || v.geo.FSInfoSector == 0 {
		return nil
	}
	fi := ondisk.FSInfo{FreeCount: v.fat.free, NextFree: v.fat.next}
	if fi == v.fsinfo {
		return nil
	}
	buf := make([]byte, v.geo.SectorSize)
	off := v.geo.FSInfoSector * int64(v.geo.SectorSize)
	if _, err := v.dev.ReadAt(buf, off); err != nil {
		return fmt.Errorf("%s: read FSINFO: %w", v.name, err)
	}
	fi.Marshal(buf)
	if _, err := v.dev.WriteAt(buf, off); err != nil {
		return fmt.Errorf("%s: write FSINFO: %w", v.name, err)
	}
	v.fsinfo = fi
	return nil
}

// writeRanges writes ranges sorted by offset, merging adjacent ones into single vectored requests
// of at most maxRequest bytes.
func (v *Volume) writeRanges(ranges []devRange) error {
	sortRuns(ranges)
	for i := 0; i < len(ranges); {
		start := ranges[i].off
		bufs := [][]byte{ranges[i].buf}
		end := start + int64(len(ranges[i].buf))
		j := i + 1
		for j < len(ranges) && ranges[j].off == end && end-start+int64(len(ranges[j].buf)) <= maxRequest {
			bufs = append(bufs, ranges[j].buf)
			end += int64(len(ranges[j].buf))
			j++
		}
		var err error
		if len(bufs) == 1 {
			_, err = v.dev.WriteAt(bufs[0], start)
		} else {
			_, err = v.dev.WritevAt(bufs, start)
		}
		if err != nil {
			return fmt.Errorf("%s: write at %d: %w", v.name, start, err)
		}
		i = j
	}
	return nil
}
