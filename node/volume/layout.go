package volume

import (
	"fmt"

	"github.com/csi-fat/csi-fat/fatvol/layout"
)

// LayoutMBR is the layout parameter's value for an MBR with one FAT partition from 1 MiB, as SD
// cards and most sticks ship; "superfloppy" (the default) is the file system on the whole device.
const LayoutMBR = "mbr"

// parseLayout reads the layout parameter, recording the default, superfloppy, as "" so that both
// spellings are one volume.
func parseLayout(val string) (string, error) {
	switch k, err := layout.ParseKind(val); {
	case err != nil:
		return "", fmt.Errorf("want superfloppy or %s", LayoutMBR)
	case k == layout.MBR:
		return LayoutMBR, nil
	}
	return "", nil
}

// layoutKind is the layout a new file system on the volume's device gets.
func (p Params) LayoutKind() layout.Kind {
	if p.Layout == LayoutMBR {
		return layout.MBR
	}
	return layout.Superfloppy
}
