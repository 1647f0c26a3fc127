package serving

import (
	"testing"

	"github.com/csi-fat/csi-fat/node/volume"
)

func TestMountOptions(t *testing.T) {
	o, err := MountOptions([]string{"noatime", "flush,shortname=winnt"}, "2000", false)
	if err != nil {
		t.Fatal(err)
	}
	if o.GID != 2000 || o.FMask != 0o002 || o.DMask != 0o002 || !o.AllowOther || !o.Flush || o.ReadOnly {
		t.Errorf("with a mount group: %+v", o)
	}
	o, err = MountOptions([]string{"umask=077"}, "2000", true)
	if err != nil || o.FMask != 0o077 || !o.ReadOnly || o.GID != 2000 {
		t.Errorf("explicit umask and read-only: %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"data=ordered"}, {"uid=x"}} {
		if _, err := MountOptions(bad, "", false); err == nil {
			t.Errorf("MountOptions(%v) accepted", bad)
		}
	}
	if _, err := MountOptions(nil, "wheel", false); err == nil {
		t.Errorf("a non-numeric mount group was accepted")
	}
	// The codepage parameter is a mount option the request's own flags may override.
	p := volume.Params{CodePage: 850}
	if o, err := MountOptions(p.StageFlags([]string{"noatime"}), "", false); err != nil || o.CodePage.Number() != 850 {
		t.Errorf("codepage parameter 850: %v, %v", o.CodePage.Number(), err)
	}
	if o, err := MountOptions(p.StageFlags([]string{"codepage=852"}), "", false); err != nil || o.CodePage.Number() != 852 {
		t.Errorf("codepage parameter 850 and mount option codepage=852: %v, %v", o.CodePage.Number(), err)
	}
	if f := (volume.Params{}).StageFlags([]string{"noatime"}); len(f) != 1 {
		t.Errorf("no codepage parameter: flags %v", f)
	}
}
