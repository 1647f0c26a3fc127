// Package mkfs creates empty FAT12/16/32 file systems with the same geometry mkfs.fat 4.2
// (dosfstools, as in Debian 12) chooses for the same size and options, so volumes made by the
// driver look exactly like volumes made by the tool people already know.
package mkfs

import (
	"errors"
	"fmt"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Options are mkfs.fat's options that matter for a volume on an image or a whole device. Zero
// values mean "choose like mkfs.fat".
type Options struct {
	FATType           ondisk.FATType // -F: 0 = by size (FAT32 from 512 MiB, else FAT12 or FAT16)
	SectorsPerCluster int            // -s: power of two 1..128; 0 = by size
	SectorSize        int            // -S: 512..4096; 0 = 512, raised to the device's logical block size
	Label             string         // -n: up to 11 ASCII characters; "" = none ("NO NAME" in the boot sector)
	VolumeID          uint32         // -i: used when VolumeIDSet
	VolumeIDSet       bool           //     else derived from the time like mkfs.fat
	NumFATs           int            // -f: 1..4; 0 = 2
	RootEntries       int            // -r: 16..32768, rounded up to fill whole (aligned) sectors; 0 = 512, 112/224 on floppy sizes; ignored on FAT32
	ReservedSectors   int            // -R: minimum reserved sectors, 1..65535; 0 = 1 (FAT12/16) or 32 (FAT32)
	Media             uint8          // -M: 0xF0 or 0xF8..0xFF; 0 = 0xF8, or the floppy media byte on floppy sizes
	HiddenSectors     uint32         // -h: sectors before the volume on its disk; 0 for an image or whole device
	Heads             int            // -g heads: 0 = derived from the size like mkfs.fat; set with SectorsPerTrack
	SectorsPerTrack   int            // -g sectors: 0 = derived from the size like mkfs.fat
	DriveNumber       uint8          // -D: used when DriveNumberSet
	DriveNumberSet    bool           //     else 0x80 with media 0xF8, 0x00 otherwise
	NoAlign           bool           // -a: do not align the FATs and data area to the cluster size
	FixedDisk         bool           // the device is a non-removable disk: mkfs.fat then skips the floppy presets
	MBR               bool           // --mbr: put a one-partition MBR table into the boot sector's code area
	CreateTime        time.Time      // time stamp of the label entry; zero = now (mkfs.fat's --invariant uses 1426325213 UTC)
	MaxSize           int64          // bytes the volume may grow to in place (growable.go); 0 or at most the size = mkfs.fat's layout
}

// Limits mkfs.fat enforces on its options.
const (
	minRootEntries = 16
	maxRootEntries = 32768
	maxNumFATs     = 4
	maxSectorSize  = 4096 // mkfs.fat allows up to 32768 with a warning; ondisk and Linux stop at 4096
)

// ErrInvalidOption reports an option mkfs.fat would refuse.
var ErrInvalidOption = errors.New("invalid mkfs option")

// validate checks each option on its own, the way mkfs.fat's option parser does.
func (o *Options) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	switch o.FATType {
	case 0, ondisk.FAT12, ondisk.FAT16, ondisk.FAT32:
	default:
		return bad("FAT type %d is not 12, 16 or 32", int(o.FATType))
	}
	if s := o.SectorsPerCluster; s != 0 && (s < 1 || s > 128 || s&(s-1) != 0) {
		return bad("sectors per cluster %d is not a power of two from 1 to 128", s)
	}
	if s := o.SectorSize; s != 0 && (s < 512 || s > maxSectorSize || s&(s-1) != 0) {
		return bad("sector size %d is not a power of two from 512 to %d", s, maxSectorSize)
	}
	if n := o.NumFATs; n != 0 && (n < 1 || n > maxNumFATs) {
		return bad("number of FATs %d is not from 1 to %d", n, maxNumFATs)
	}
	if n := o.RootEntries; n != 0 && (n < minRootEntries || n > maxRootEntries) {
		return bad("root directory entries %d is not from %d to %d", n, minRootEntries, maxRootEntries)
	}
	if n := o.ReservedSectors; n < 0 || n > 0xFFFF {
		return bad("reserved sectors %d is not from 1 to 65535", n)
	}
	if m := o.Media; m != 0 && m != 0xF0 && m < 0xF8 {
		return bad("media byte 0x%02X is neither 0xF0 nor 0xF8..0xFF", m)
	}
	if (o.Heads == 0) != (o.SectorsPerTrack == 0) {
		return bad("heads (%d) and sectors per track (%d) must be given together", o.Heads, o.SectorsPerTrack)
	}
	if o.Heads < 0 || o.Heads > 0xFFFF || o.SectorsPerTrack < 0 || o.SectorsPerTrack > 0xFFFF {
		return bad("geometry %d heads / %d sectors per track is out of range 1..65535", o.Heads, o.SectorsPerTrack)
	}
	if o.MaxSize < 0 {
		return bad("maximum size %d is negative", o.MaxSize)
	}
	if _, err := ondisk.EncodeLabel(o.Label); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return nil
}
