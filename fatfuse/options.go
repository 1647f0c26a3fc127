package fatfuse

import (
	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
)

// VolumeOptions are the engine options the mount options call for.
func VolumeOptions(o mountopt.Options) fatvol.Options {
	return fatvol.Options{ReadOnly: o.ReadOnly, ShortName: o.ShortName, Location: o.Location, Sync: o.Sync, Flush: o.Flush,
		ContinueAfterDeviceError: o.Errors == "continue", CodePage: o.CodePage}
}
