package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
)

// openMedium opens an image file or a block device with the given claim (on the whole medium)
// and finds its FAT file system: the medium whole when it is a superfloppy, else the partition
// named by partition (a number, or a GPT partition's unique GUID) or the first FAT partition,
// as a window of the medium. It says on out which partition it serves.
func openMedium(path string, claim blockdev.Claim, partition string, out io.Writer, cmd string) (blockdev.Device, error) {
	f, err := blockdev.OpenClaimed(path, claim)
	if err != nil {
		return nil, err
	}
	// Large reads and writes with O_DIRECT where the medium takes it; else through the page cache.
	_ = f.OpenDirect()
	dev, p, err := layout.Open(f, partition)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Number != 0 {
		fmt.Fprintf(out, "csi-fat %s: %s: %s\n", cmd, path, p)
	}
	return dev, nil
}

// partitionOption takes partition=N|GUID out of a mount option string: it chooses what is
// served, not how, so the FUSE layer never sees it.
func partitionOption(opts string) (rest, partition string, err error) {
	var kept []string
	for _, o := range strings.Split(opts, ",") {
		if v, ok := strings.CutPrefix(o, "partition="); ok {
			if v == "" {
				return "", "", fmt.Errorf("partition=: want a partition number or a GPT partition GUID")
			}
			partition = v
			continue
		}
		kept = append(kept, o)
	}
	return strings.Join(kept, ","), partition, nil
}

// claimFor is how a tool claims a medium it reads (Shared) or writes (Exclusive).
func claimFor(readOnly bool) blockdev.Claim {
	if readOnly {
		return blockdev.Shared
	}
	return blockdev.Exclusive
}
