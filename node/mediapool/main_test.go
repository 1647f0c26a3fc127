package mediapool

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/mounter"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/prober"
)

// probeParentEnv makes the test binary a driver that runs one prober on the device it names and
// waits, for a test that kills it.
const probeParentEnv = "CSI_FAT_TEST_PROBE_PARENT"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "probe-medium" {
		// The test binary stands in for csi-fat as the prober of removable media.
		os.Exit(mounter.ProbeMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if dev := os.Getenv(probeParentEnv); dev != "" {
		f, err := os.Open(dev)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_, err = prober.Run(mounters.Config{Mode: mounters.Process, ProbeTimeout: time.Minute}, f, dev, 1<<20, 512)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
