package driver

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-fat/csi-fat/node"
	"github.com/csi-fat/csi-fat/node/inprocess"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/usbtest"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

const testNode = "node-a"

// testMounterEnv, set to process, runs the in-process drivers of every test with mounter
// processes: CSI_FAT_TEST_MOUNTER=process go test ./driver/
const testMounterEnv = "CSI_FAT_TEST_MOUNTER"

// requireFUSE skips a test that needs real mounts where there are none to be had.
func requireFUSE(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "FUSE and bind mounts")
	testenv.RequireFUSE(t)
}

// testDriver is a driver serving on a unix socket in a temporary directory, with a client.
type testDriver struct {
	*Driver
	dir      string
	endpoint string
	conn     *grpc.ClientConn
	id       csi.IdentityClient
	ctrl     csi.ControllerClient
	node     csi.NodeClient
}

// startDriver starts a driver whose pool, state and socket live in dir (a new temporary
// directory when ""). At cleanup it stops, releases its mounts, and any mount left under the
// directory is detached.
func startDriver(t *testing.T, dir string, configure func(*Config)) *testDriver {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := Config{
		Endpoint: "unix://" + filepath.Join(dir, "csi.sock"),
		Node: node.Config{
			NodeID:   testNode,
			StateDir: filepath.Join(dir, "state"),
			PoolDir:  filepath.Join(dir, "pool"),
			// The engine, for the in-process mode's tests; the mounter modes leave it unused.
			InProcess: inprocess.Engine{},
		},
	}
	if os.Getenv(testMounterEnv) != "" {
		cfg.Node.Mounter.Mode = os.Getenv(testMounterEnv)
	}
	if configure != nil {
		configure(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	td := &testDriver{Driver: d, dir: dir, endpoint: cfg.Endpoint, conn: conn,
		id: csi.NewIdentityClient(conn), ctrl: csi.NewControllerClient(conn), node: csi.NewNodeClient(conn)}
	t.Cleanup(func() { td.shutdown(t) })
	return td
}

// shutdown stops the driver and takes down its mounts.
func (td *testDriver) shutdown(t *testing.T) {
	td.conn.Close()
	td.Stop()
	td.Manager().Release()
	detachUnder(t, td.dir)
}

// detachUnder lazily unmounts every mount below dir, deepest first.
func detachUnder(t *testing.T, dir string) {
	t.Helper()
	for _, mp := range mountsUnder(t, dir) {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			t.Errorf("detach %s: %v", mp, err)
		}
	}
}

// mountsUnder lists the mount points below dir, deepest first.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// withUSB enables the removable-media pool on a fake sysfs tree.
func withUSB(f *usbtest.Fake) func(*Config) {
	return func(c *Config) {
		u := media.DefaultConfig()
		u.SysfsRoot, u.ByIDDir, u.ByPathDir, u.DevDir, u.DeviceGlob = f.SysfsRoot, f.ByIDDir, f.ByPathDir, f.DevDir, f.Glob
		c.Node.USB = &u
	}
}

// mountCap is a mount capability with an access mode.
func mountCap(mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
	}
}

// scrapeMetrics reads the driver's /metrics page.
func scrapeMetrics(t *testing.T, td *testDriver) string {
	t.Helper()
	resp, err := http.Get("http://" + td.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %s, %v", resp.Status, err)
	}
	return string(body)
}
