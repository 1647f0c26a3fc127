package mkfs

import "github.com/csi-fat/csi-fat/fatvol/ondisk"

// deviceParams are the starting values mkfs.fat's establish_params derives from the device size
// before the cluster search: disk geometry, media byte, first cluster size to try, default root
// directory size, and the FAT type when the size alone decides it.
type deviceParams struct {
	heads, sectorsPerTrack uint32
	media                  uint8
	clusterSize            int
	rootEntries            int
	fatType                ondisk.FATType
}

// Floppy formats mkfs.fat recognises by size (in KiB) on anything but a fixed disk.
var floppyFormats = map[int64]struct {
	sectorsPerTrack uint32
	media           uint8
	clusterSize     int
	rootEntries     int
}{
	360:  {9, 0xfd, 2, 112},
	720:  {9, 0xf9, 2, 112},
	1200: {15, 0xf9, 1, 224},
	1440: {18, 0xf0, 1, 224},
	2880: {36, 0xf0, 2, 224},
}

// fat32AutoBytes is the size from which mkfs.fat picks FAT32 when no type is asked for.
const fat32AutoBytes = 512 << 20

// establishParams mirrors mkfs.fat 4.2's establish_params for a device that cannot report its
// CHS geometry (an image file, a loop device).
func establishParams(size int64, sectorSize int, opts *Options) deviceParams {
	p := deviceParams{media: 0xf8, clusterSize: 4, rootEntries: 512, fatType: opts.FATType}
	total := uint64(size) / uint64(sectorSize)
	if total <= 524288 {
		// Below 256 MiB: the CHS recommendation of the SD card file system specification.
		switch {
		case total <= 32768:
			p.heads = 2
		case total <= 65536:
			p.heads = 4
		case total <= 262144:
			p.heads = 8
		default:
			p.heads = 16
		}
		p.sectorsPerTrack = 32
		if total <= 4096 {
			p.sectorsPerTrack = 16
		}
	} else {
		// LBA-assist translation.
		switch {
		case total <= 16*63*1024:
			p.heads = 16
		case total <= 32*63*1024:
			p.heads = 32
		case total <= 64*63*1024:
			p.heads = 64
		case total <= 128*63*1024:
			p.heads = 128
		default:
			p.heads = 255
		}
		p.sectorsPerTrack = 63
	}
	if f, ok := floppyFormats[size/1024]; ok && !opts.FixedDisk {
		p.sectorsPerTrack, p.heads = f.sectorsPerTrack, 2
		p.media, p.clusterSize, p.rootEntries = f.media, f.clusterSize, f.rootEntries
	}
	if p.fatType == 0 && size >= fat32AutoBytes {
		p.fatType = ondisk.FAT32
	}
	if p.fatType == ondisk.FAT32 {
		// Microsoft's format command's table (fatgen103): 512 B clusters up to 260 MiB, 4 KiB up
		// to 8 GiB, 8 KiB to 16 GiB, 16 KiB to 32 GiB, 32 KiB beyond (counted in sectors).
		sectors := uint64(size) / uint64(sectorSize)
		switch {
		case sectors > 32*1024*1024*2:
			p.clusterSize = 64
		case sectors > 16*1024*1024*2:
			p.clusterSize = 32
		case sectors > 8*1024*1024*2:
			p.clusterSize = 16
		case sectors > 260*1024*2:
			p.clusterSize = 8
		default:
			p.clusterSize = 1
		}
	}
	if opts.RootEntries != 0 {
		p.rootEntries = opts.RootEntries
	}
	if opts.Heads != 0 {
		p.heads, p.sectorsPerTrack = uint32(opts.Heads), uint32(opts.SectorsPerTrack)
	}
	if opts.SectorsPerCluster != 0 {
		p.clusterSize = opts.SectorsPerCluster
	}
	if opts.Media != 0 {
		p.media = opts.Media
	}
	return p
}
