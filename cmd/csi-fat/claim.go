package main

import (
	"fmt"
	"io"

	"github.com/csi-fat/csi-fat/fatvol"
)

// warnWriter warns that a medium opened read-only has a writer, as fsck.fat warns of a
// mounted device it checks: allowed, but what is read may be changing under the reader.
func warnWriter(out io.Writer, cmd, path, writer, what string) {
	if writer == "" {
		return
	}
	fmt.Fprintf(out, "csi-fat %s: warning: %s is in use by a writer (%s); %s read-only, but it may change while it is read\n",
		cmd, path, writer, what)
}

// volumeWriter is the writer a volume opened read-only found on its medium, or "".
func volumeWriter(vol *fatvol.Volume) string {
	if f, ok := vol.Device().(interface{ Writer() string }); ok {
		return f.Writer()
	}
	return ""
}
