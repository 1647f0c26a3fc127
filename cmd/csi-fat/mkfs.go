package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

func init() {
	register(&command{name: "mkfs", summary: "create an empty FAT file system (like mkfs.fat)", run: runMkfs})
}

// mkfsFlags are the command's options, parsed by one FlagSet.
type mkfsFlags struct {
	fatType, sectorsPerCluster, sectorSize, numFATs, rootEntries int
	label, volumeID, size, maxSize                               string
	layout                                                       string
}

func newMkfsFlagSet(out io.Writer) (*flag.FlagSet, *mkfsFlags) {
	var f mkfsFlags
	fs := flag.NewFlagSet("mkfs", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&f.fatType, "F", 0, "FAT type: 12, 16 or 32 (default: by size, FAT32 from 512 MiB)")
	fs.IntVar(&f.sectorsPerCluster, "s", 0, "sectors per cluster: a power of two from 1 to 128 (default: by size)")
	fs.IntVar(&f.sectorSize, "S", 0, "logical sector size: 512, 1024, 2048 or 4096 (default: 512, or the device's if larger)")
	fs.StringVar(&f.label, "n", "", "volume label, up to 11 ASCII characters (default: none)")
	fs.StringVar(&f.volumeID, "i", "", "volume ID, a 32-bit hexadecimal number (default: from the current time)")
	fs.IntVar(&f.numFATs, "f", 0, "number of FATs, 1 to 4 (default: 2)")
	fs.IntVar(&f.rootEntries, "r", 0, "FAT12/16 root directory entries, 16 to 32768 (default: 512; 112 or 224 on floppy sizes)")
	fs.StringVar(&f.size, "size", "", "create or extend PATH as a sparse image file of SIZE bytes; suffixes K, M, G, T are powers of 1024\n(default: use the existing file or block device whole)")
	fs.StringVar(&f.maxSize, "max-size", "", "leave room to grow the volume in place up to MAX_SIZE bytes (K, M, G, T suffixes): the FAT type\n"+
		"and cluster size suit both sizes and the FATs cover MAX_SIZE, so the layout is no longer mkfs.fat's\n(default: none, mkfs.fat's layout)")
	fs.StringVar(&f.layout, "layout", "superfloppy", "superfloppy: the file system over the whole of PATH, as Windows formats removable drives;\n"+
		"mbr: an MBR partition table with one FAT partition from 1 MiB to the end, as SD cards and most sticks\n"+
		"ship (type 0x01 FAT12, 0x04 FAT16 under 32 MiB, 0x06 FAT16, 0x0c FAT32)")
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: csi-fat mkfs [-F 12|16|32] [-s SECTORS_PER_CLUSTER] [-S SECTOR_SIZE] [-n LABEL] [-i VOLUME_ID_HEX]\n"+
			"                    [-f NUMBER_OF_FATS] [-r ROOT_ENTRIES] [--size SIZE] [--max-size MAX_SIZE] [--layout superfloppy|mbr] PATH\n\n"+
			"Create an empty FAT file system over the whole of PATH (an image file or a block device), with the\n"+
			"geometry mkfs.fat 4.2 chooses for the same size and options. Options go before PATH. PATH is claimed\n"+
			"for writing (an OFD lock on an image file, O_EXCL on a block device) and refused, with nothing\n"+
			"written, while another writer (csi-fat mount, fsck -a, the driver, a kernel mount) holds it.\n\noptions:\n")
		fs.PrintDefaults()
	}
	return fs, &f
}

// options turns the flags into mkfs options; the mkfs package validates the values.
func (f *mkfsFlags) options() (mkfs.Options, error) {
	opts := mkfs.Options{
		FATType:           ondisk.FATType(f.fatType),
		SectorsPerCluster: f.sectorsPerCluster,
		SectorSize:        f.sectorSize,
		Label:             f.label,
		NumFATs:           f.numFATs,
		RootEntries:       f.rootEntries,
	}
	if f.fatType != 0 && f.fatType != 12 && f.fatType != 16 && f.fatType != 32 {
		return opts, fmt.Errorf("-F %d: FAT type must be 12, 16 or 32", f.fatType)
	}
	if f.sectorsPerCluster < 0 || f.sectorSize < 0 || f.numFATs < 0 || f.rootEntries < 0 {
		return opts, errors.New("-s, -S, -f and -r must not be negative")
	}
	if f.volumeID != "" {
		s := strings.TrimPrefix(strings.TrimPrefix(f.volumeID, "0x"), "0X")
		id, err := strconv.ParseUint(s, 16, 32)
		if err != nil {
			return opts, fmt.Errorf("-i %q: volume ID must be a hexadecimal number of at most 32 bits", f.volumeID)
		}
		opts.VolumeID, opts.VolumeIDSet = uint32(id), true
	}
	if f.maxSize != "" {
		n, err := parseSize(f.maxSize)
		if err != nil {
			return opts, fmt.Errorf("--max-size: %w", err)
		}
		opts.MaxSize = n
	}
	return opts, nil
}

// parseSize reads a byte count with an optional K, M, G or T suffix (powers of 1024).
func parseSize(s string) (int64, error) {
	num, shift := s, 0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			shift = 10
		case 'm', 'M':
			shift = 20
		case 'g', 'G':
			shift = 30
		case 't', 'T':
			shift = 40
		}
		if shift != 0 {
			num = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("size %q: want a positive whole number of bytes, optionally with a K, M, G or T suffix", s)
	}
	if v > (1<<63-1)>>shift {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return v << shift, nil
}

func runMkfs(args []string) int {
	fs, f := newMkfsFlagSet(os.Stderr)
	if ok, code := parseFlags(fs, args, 1); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(os.Stderr, "csi-fat mkfs: want exactly one PATH after the options, got %d arguments %q\n", fs.NArg(), fs.Args())
		fs.Usage()
		return 1
	}
	path := fs.Arg(0)
	if err := mkfsMain(path, f); errors.Is(err, blockdev.ErrInUse) {
		fmt.Fprintf(os.Stderr, "csi-fat mkfs: %v\n", err) // names the path already
		return 1
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat mkfs: %s: %v\n", path, err)
		return 1
	}
	return 0
}

func mkfsMain(path string, f *mkfsFlags) error {
	opts, err := f.options()
	if err != nil {
		return err
	}
	kind, err := layout.ParseKind(f.layout)
	if err != nil {
		return fmt.Errorf("--layout: %w", err)
	}
	var dev *blockdev.File
	if f.size != "" {
		size, err := parseSize(f.size)
		if err != nil {
			return err
		}
		// Plan first, so a size mkfs refuses leaves no image behind.
		if err := layout.Plan(size, blockdev.ImageLogicalBlockSize, kind, opts); err != nil {
			return err
		}
		dev, err = blockdev.CreateImage(path, size)
		if err != nil {
			return err
		}
	} else {
		dev, err = blockdev.Open(path, false)
		if err != nil {
			return err
		}
	}
	g, part, err := layout.Format(dev, kind, opts)
	if cerr := dev.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	bytes := g.TotalSectors * int64(g.SectorSize)
	fmt.Printf("%s: %s, %s (%d bytes), %d clusters of %d bytes\n", path, g.Type, humanSize(bytes), bytes, g.Clusters, g.ClusterSize)
	if kind == layout.MBR {
		fmt.Printf("%s: MBR partition table, %s\n", path, part)
	}
	if opts.MaxSize > bytes {
		grow := g.MaxGrowSectors() * int64(g.SectorSize)
		fmt.Printf("%s: can grow in place to %s (%d bytes)\n", path, humanSize(grow), grow)
	}
	return nil
}

// humanSize prints a byte count in the largest binary unit that keeps it at least 1.
func humanSize(n int64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
