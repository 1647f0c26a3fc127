package node

import (
	"os"
	"testing"

	"github.com/csi-fat/csi-fat/mounter"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "probe-medium" {
		// The test binary stands in for csi-fat as the prober of removable media.
		os.Exit(mounter.ProbeMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
