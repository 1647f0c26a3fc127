package fatfuse

import (
	"testing"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// TestVolumeOptions: the mount options the engine applies reach it; check and repair are the
// opener's, never a clean mark of the engine's own.
func TestVolumeOptions(t *testing.T) {
	for _, tt := range []struct {
		in    string
		check func(mountopt.Options) bool
	}{
		{"ro", func(o mountopt.Options) bool { return VolumeOptions(o).ReadOnly }},
		{"shortname=winnt", func(o mountopt.Options) bool { return VolumeOptions(o).ShortName == ondisk.ShortNameWinNT }},
		{"codepage=850", func(o mountopt.Options) bool { return VolumeOptions(o).CodePage.Number() == 850 }},
		{"", func(o mountopt.Options) bool {
			return VolumeOptions(o).CodePage.Number() == 437 && !VolumeOptions(o).ReadOnly
		}},
		{"check", func(o mountopt.Options) bool { return !VolumeOptions(o).Checked }},
		{"sync,flush", func(o mountopt.Options) bool { return VolumeOptions(o).Sync && VolumeOptions(o).Flush }},
		{"errors=continue", func(o mountopt.Options) bool { return VolumeOptions(o).ContinueAfterDeviceError }},
		{"tz=UTC", func(o mountopt.Options) bool { return VolumeOptions(o).Location != nil }},
	} {
		o, err := mountopt.ParseOptions(tt.in)
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		if !tt.check(o) {
			t.Errorf("%q: engine options %+v", tt.in, VolumeOptions(o))
		}
	}
}
