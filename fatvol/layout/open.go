package layout

import (
	"errors"
	"fmt"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// ErrNoFAT is wrapped when a medium holds no FAT file system where one was looked for.
var ErrNoFAT = errors.New("no FAT file system")

// Find returns the partition of m that holds the FAT file system to serve: the whole medium of a
// superfloppy, or of a medium with neither a table nor a FAT boot sector (a damaged boot sector
// is for the engine's checks to name); else the partition sel names (its number, or a GPT partition's unique GUID), or
// with sel "" the first partition whose type says FAT and whose first sector is a FAT boot
// sector. A named partition of another type is taken when it holds a FAT boot sector. The error
// says what the medium holds instead.
func Find(m Medium, sel string) (Partition, *Layout, error) {
	l, err := Read(m)
	if err != nil {
		// A hybrid ISO image's table overlaps the image: name the image, not the table.
		if sig, why := whyNotFAT(m, nil, err); sig != nil {
			return Partition{}, nil, fmt.Errorf("%w: %s", ErrNoFAT, why)
		}
		return Partition{}, nil, err
	}
	switch l.Kind {
	case Superfloppy:
		if sel != "" {
			return Partition{}, l, fmt.Errorf("partition %s: %w: the medium has no partition table, it is %s", sel, ErrNoFAT, l.Describe())
		}
		return l.Partitions[0], l, nil
	case Unknown:
		// Neither a table nor a FAT boot sector: perhaps a FAT volume whose boot sector is
		// damaged. The whole medium goes to the engine or the checker, which say what is wrong.
		if sel != "" {
			return Partition{}, l, fmt.Errorf("partition %s: %w: the medium has %s", sel, ErrNoFAT, l.Describe())
		}
		if sig, why := whyNotFAT(m, l, nil); sig != nil {
			return Partition{}, l, fmt.Errorf("%w: %s", ErrNoFAT, why)
		}
		return Partition{Number: 0, Size: l.Size}, l, nil
	}
	if sel != "" {
		p, ok := l.Partition(sel)
		if !ok {
			return Partition{}, l, fmt.Errorf("partition %s: no such partition in %s", sel, l.Describe())
		}
		if !holdsFAT(m, p) {
			return Partition{}, l, fmt.Errorf("partition %s: %w: %s", sel, ErrNoFAT, describePartition(m, l, p))
		}
		return p, l, nil
	}
	for _, p := range l.Partitions {
		if p.IsFATType() && holdsFAT(m, p) {
			return p, l, nil
		}
	}
	_, why := whyNotFAT(m, l, nil)
	return Partition{}, l, fmt.Errorf("%w: %s", ErrNoFAT, why)
}

// holdsFAT reads the partition's first sector.
func holdsFAT(m Medium, p Partition) bool {
	s, err := readSector(m, p.Start/int64(m.LogicalBlockSize()), max(m.LogicalBlockSize(), 512))
	return err == nil && IsFATBootSector(s)
}

// Describe says what m holds, partition by partition, for an error that no FAT file system was
// found.
func Describe(m Medium, l *Layout) string {
	if l.Kind != MBR && l.Kind != GPT {
		return l.Describe()
	}
	if len(l.Partitions) == 0 {
		return l.Describe()
	}
	parts := make([]string, len(l.Partitions))
	for i, p := range l.Partitions {
		parts[i] = describePartition(m, l, p)
	}
	return fmt.Sprintf("%s partition table with %s", l.Kind.article(), strings.Join(parts, "; "))
}

// describePartition names a partition and what it holds, by signature.
func describePartition(m Medium, l *Layout, p Partition) string {
	sig, ok, err := ProbeAt(m, p.Start, p.Size)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: unreadable: %v", p, err)
	case !ok:
		return p.String() + ": no file system signature"
	}
	return p.String() + ": " + sig.String()
}

// Open opens the FAT file system on dev as Find finds it: dev itself for a superfloppy, else a
// Window of the partition, which then owns dev. On error the caller keeps dev.
func Open(dev blockdev.Device, sel string) (blockdev.Device, Partition, error) {
	p, _, err := Find(dev, sel)
	if err != nil {
		return nil, p, err
	}
	if p.Number == 0 {
		return dev, p, nil
	}
	w, err := blockdev.NewWindow(dev, p.Start, p.Size)
	if err != nil {
		return nil, p, fmt.Errorf("%s: %w", p, err)
	}
	return w, p, nil
}
