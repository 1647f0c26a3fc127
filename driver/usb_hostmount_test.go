package driver

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// mountElsewhere mounts dev (ext4, by the kernel: vfat is not built into every test kernel) in a mount namespace of its own, as the host's
// mounts are to a driver in a container, and returns the mountinfo of a process in that
// namespace. The process, and with it the namespace and the mount, goes at cleanup.
func mountElsewhere(t *testing.T, dev string) string {
	t.Helper()
	testenv.RequireTool(t, "unshare", "mount")
	dir := t.TempDir()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount -t ext4 %s %s && echo mounted && exec sleep 600", dev, dir))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "mounted\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("mount %s in a mount namespace of its own: %q %s", dev, line, stderr.String())
	}
	return fmt.Sprintf("/proc/%d/mountinfo", cmd.Process.Pid)
}

// TestUSBHostMountTable: a stick mounted in another mount namespace (the host, seen from a
// driver in a container) is not in the driver's own mount table. With that namespace's table as
// MountInfo (the chart's /proc/1/mountinfo under hostPID) it is busy: GetCapacity leaves it out,
// a claim names it as mounted by the host; with its own table the driver counts it as a free
// stick (one wipe=true may format).
func TestUSBHostMountTable(t *testing.T) {
	requireLoop(t)
	testenv.RequireTool(t, "mkfs.ext4")
	fake := usbtest.New(t)
	stick := fake.Add(t, 40<<20, "Fake", "Mounted", "HOST0001")
	run(t, "mkfs.ext4", "-q", "-F", stick.Loop)
	hostTable := mountElsewhere(t, stick.Loop)
	capacity := func(td *testDriver) int64 {
		t.Helper()
		resp, err := td.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{Parameters: map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamWipe: "true"}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetAvailableCapacity()
	}

	own := startDriver(t, "", all(withUSB(fake)))
	if c := capacity(own); c != stick.Size {
		t.Fatalf("with its own mount table the driver counts %d bytes, want the stick's %d: the test's mount is not hidden from it", c, stick.Size)
	}

	td := startDriver(t, "", all(withUSB(fake), func(c *Config) { c.Node.USB.MountInfo = hostTable }))
	if c := capacity(td); c != 0 {
		t.Errorf("with the host's mount table GetCapacity is %d, want 0: the stick is mounted", c)
	}
	_, err := usbVolume(t, td, "mounted", 1, map[string]string{volume.ParamWipe: "true"})
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "mounted by the host") {
		t.Fatalf("claim of a stick the host has mounted: %v, want ResourceExhausted naming the mount", err)
	}
}
