package mkfs

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// ErrNoFit reports a size that no layout of the asked FAT type and cluster size fits, like
// mkfs.fat's "Attempting to create a too small or a too large filesystem".
var ErrNoFit = errors.New("volume size does not fit")

// Reserved-area layout of a FAT32 volume as mkfs.fat writes it.
const (
	fat32RootCluster    = 2
	fat32FSInfoSector   = 1
	fat32Reserved       = 32
	fat16Reserved       = 1
	tinyVolumeSectors   = 8192 // at most this many sectors (a floppy): mkfs.fat does not align
	minDataBlocks       = 32   // mkfs.fat refuses volumes with fewer 1 KiB blocks after the metadata
	mkfsBlockSize       = 1024
	hardSectorSize      = 512
	extBootSignature    = 0x29
	driveNumberFixed    = 0x80
	driveNumberFloppy   = 0x00
	mediaFixed          = 0xf8
	dirEntryBytes       = ondisk.DirEntrySize
	oemName             = "mkfs.fat"
	maxTotalSectors     = math.MaxUint32
	fat32MinReserved    = 2
	backupBootPreferred = 6
)

// layout is a planned volume: the boot sector plus what Format writes besides it.
type layout struct {
	bs         *ondisk.BootSector
	fatType    ondisk.FATType
	sectorSize int
	clusters   uint32
	fatSectors uint32
	label      [11]byte // as in the boot sector
	labelEntry bool     // write a volume label entry in the root directory
	backupInfo uint32   // FAT32: sector of the backup FSINFO, 0 for none
	createTime time.Time
	mbr        bool
}

// Plan computes the boot sector Format would write on a device of size bytes, without writing.
// It is what mkfs.fat would choose for an image file of that size with the same options; it
// returns an error wherever mkfs.fat refuses. With VolumeIDSet false the volume ID comes from the
// current time, so two calls differ in it.
func Plan(size int64, opts Options) (*ondisk.BootSector, error) {
	l, err := plan(size, opts, time.Now())
	if err != nil {
		return nil, err
	}
	return l.bs, nil
}

// volumeIDFromTime is mkfs.fat's volume ID: the seconds shifted into the high bits, the
// microseconds in the low 20.
func volumeIDFromTime(t time.Time) uint32 {
	return uint32(t.Unix())<<20 | uint32(t.Nanosecond()/1000)
}

// plan mirrors mkfs.fat 4.2's establish_params and setup_tables.
func plan(size int64, opts Options, now time.Time) (*layout, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.MaxSize > size {
		return planGrowable(size, opts, now)
	}
	ss := opts.SectorSize
	if ss == 0 {
		ss = hardSectorSize
	}
	if size < int64(ss) {
		return nil, fmt.Errorf("%w: %d bytes is smaller than one %d-byte sector", ErrNoFit, size, ss)
	}
	label, _ := ondisk.EncodeLabel(opts.Label) // validated above
	numFATs := opts.NumFATs
	if numFATs == 0 {
		numFATs = 2
	}
	p := establishParams(size, ss, &opts)

	driveNumber := uint8(driveNumberFloppy)
	if p.media == mediaFixed {
		driveNumber = driveNumberFixed
	}
	if opts.DriveNumberSet {
		driveNumber = opts.DriveNumber
	}
	rootEntries := p.rootEntries
	if p.fatType == ondisk.FAT32 {
		rootEntries = 0 // the root directory is a cluster chain
	}
	reserved := opts.ReservedSectors
	switch {
	case reserved == 0 && p.fatType == ondisk.FAT32:
		reserved = fat32Reserved
	case reserved == 0:
		reserved = fat16Reserved
	case p.fatType == ondisk.FAT32 && reserved < fat32MinReserved:
		return nil, fmt.Errorf("%w: FAT32 needs at least %d reserved sectors, not %d", ErrInvalidOption, fat32MinReserved, reserved)
	}

	// The volume: whole sectors, at most 2^32-1 of them, and (when aligning) whole tracks, which
	// DOS and mtools want.
	blocks := uint64(size) / mkfsBlockSize
	var numSectors uint32
	if n := blocks*mkfsBlockSize/uint64(ss) + uint64(size%mkfsBlockSize)/uint64(ss); n > maxTotalSectors {
		numSectors = maxTotalSectors
		blocks = maxTotalSectors * uint64(ss) / mkfsBlockSize
	} else {
		numSectors = uint32(n)
	}
	align := !opts.NoAlign
	if align {
		numSectors = numSectors / p.sectorsPerTrack * p.sectorsPerTrack
	}
	rootDirSectors := uint32(cdiv(int32(rootEntries*dirEntryBytes), int32(ss)))
	if numSectors <= tinyVolumeSectors {
		align = false
	}
	maxClusterSize := 128
	if opts.SectorsPerCluster != 0 {
		maxClusterSize = opts.SectorsPerCluster
	}
	s := clusterSearch{
		numSectors:     numSectors,
		sectorSize:     uint32(ss),
		reserved:       uint32(reserved),
		rootDirSectors: rootDirSectors,
		numFATs:        uint32(numFATs),
		align:          align,
		fatType:        p.fatType,
		fat32Forced:    opts.FATType == ondisk.FAT32,
	}
	r := s.search(p.clusterSize, maxClusterSize)
	if r.chosen.clusters == 0 {
		return nil, noFitError(size, ss, opts, r)
	}
	cs := r.clusterSize
	reserved = int(alignTo(uint32(reserved), cs, align))
	if r.fatType == ondisk.FAT32 {
		rootEntries = 0
	} else {
		// Fill the (aligned) root directory sectors. Unaligned, mkfs.fat 4.2 keeps the -r count
		// as given, and a count that leaves a sector partly unused is refused by fsck.fat ("doesn't
		// span an integral number of sectors") and by Linux; we round it up to whole sectors,
		// which changes nothing else in the layout.
		rootEntries = int(alignTo(rootDirSectors, cs, align)) * (ss / dirEntryBytes)
	}
	firstData := int64(reserved) + int64(numFATs)*int64(r.chosen.fatSectors) + int64(cdiv(int32(rootEntries*dirEntryBytes), int32(ss)))
	firstDataBlock := (firstData*int64(ss/hardSectorSize) + 1) / 2
	if blocks < uint64(firstDataBlock+minDataBlocks) {
		return nil, fmt.Errorf("%w: %d bytes is too small: the %s metadata alone takes %d KiB (mkfs.fat: too few blocks for viable filesystem)",
			ErrNoFit, size, r.fatType, firstDataBlock)
	}

	bs := &ondisk.BootSector{
		BytesPerSector:    uint16(ss),
		SectorsPerCluster: uint8(cs),
		ReservedSectors:   uint16(reserved),
		NumFATs:           uint8(numFATs),
		RootEntries:       uint16(rootEntries),
		Media:             p.media,
		SectorsPerTrack:   uint16(p.sectorsPerTrack),
		NumHeads:          uint16(p.heads),
		HiddenSectors:     opts.HiddenSectors,
		DriveNumber:       driveNumber,
		BootSig:           extBootSignature,
		VolumeLabel:       label,
	}
	copy(bs.OEMName[:], oemName)
	if numSectors >= 1<<16 {
		bs.TotalSectors32 = numSectors
	} else {
		bs.TotalSectors16 = uint16(numSectors)
	}
	bs.VolumeID = volumeIDFromTime(now)
	if opts.VolumeIDSet {
		bs.VolumeID = opts.VolumeID
	}
	l := &layout{
		bs: bs, fatType: r.fatType, sectorSize: ss, clusters: r.chosen.clusters, fatSectors: r.chosen.fatSectors,
		label: label, labelEntry: label != ondisk.NoName, createTime: opts.CreateTime, mbr: opts.MBR,
	}
	if l.createTime.IsZero() {
		l.createTime = now
	}
	copy(bs.FSType[:], fmt.Sprintf("%-8s", r.fatType.String()))
	codeOffset := bootCodeOffsetFAT16
	if r.fatType == ondisk.FAT32 {
		codeOffset = bootCodeOffsetFAT32
		bs.FATSize32 = r.chosen.fatSectors
		bs.RootCluster = fat32RootCluster
		bs.FSInfoSector = fat32FSInfoSector
		bs.BackupBootSector = uint16(backupBootSector(uint32(reserved), fat32FSInfoSector))
		if b := uint32(bs.BackupBootSector); b != 0 && b+fat32FSInfoSector < uint32(reserved) {
			l.backupInfo = b + fat32FSInfoSector
		}
	} else {
		bs.FATSize16 = uint16(r.chosen.fatSectors)
	}
	bs.Jump = [3]byte{0xeb, byte(codeOffset - 2), 0x90}
	return l, nil
}

// backupBootSector is where mkfs.fat puts the FAT32 backup boot sector: sector 6 when there is
// room, else as late in the reserved area as leaves room for the backup FSINFO, else none.
func backupBootSector(reserved, info uint32) uint32 {
	switch {
	case reserved >= 7 && info != backupBootPreferred:
		return backupBootPreferred
	case reserved >= 3+info && info != reserved-2 && info != reserved-1:
		return reserved - 2
	case reserved >= 3 && info != reserved-1:
		return reserved - 1
	}
	return 0
}

// noFitError explains why the cluster search failed, with the wording of what went wrong.
func noFitError(size int64, ss int, opts Options, r searchResult) error {
	what := "FAT12 or FAT16"
	if r.fatType == ondisk.FAT32 || opts.FATType != 0 {
		what = r.fatType.String()
	}
	var fit fatFit
	switch {
	case opts.FATType == 0 && r.fatType != ondisk.FAT32:
		fit = fatFit{tooMany: r.fit12.tooMany && r.fit16.tooMany}
	default:
		fit = r.chosen
	}
	reason := "too few clusters"
	if fit.tooMany {
		reason = "too many clusters"
	}
	with := "any cluster size"
	if opts.SectorsPerCluster != 0 {
		with = fmt.Sprintf("%d sectors per cluster (try fewer or more)", opts.SectorsPerCluster)
	}
	return fmt.Errorf("%w: %d bytes (%d-byte sectors) gives %s for %s with %s", ErrNoFit, size, ss, reason, what, with)
}
