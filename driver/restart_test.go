package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-fat/csi-fat/mounter"
	"github.com/csi-fat/csi-fat/node"
	"github.com/csi-fat/csi-fat/node/inprocess"
)

// childDriverEnv carries a Config to a copy of the test binary that runs the driver as its own
// process, so a test can kill it as a crash does.
const childDriverEnv = "CSI_FAT_TEST_CHILD_DRIVER"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "mounter" {
		// The test binary stands in for csi-fat as the mounter command (mounters.Config.Command).
		os.Exit(mounter.Main(os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "probe-medium" {
		// And as the prober of removable media outside in-process mode.
		os.Exit(mounter.ProbeMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if cfg := os.Getenv(childDriverEnv); cfg != "" {
		os.Exit(runChildDriver(cfg))
	}
	os.Exit(m.Run())
}

func runChildDriver(cfgJSON string) int {
	var cfg Config
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.Node.InProcess = inprocess.Engine{} // an interface: not in the JSON
	d, err := New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// childDriver is the driver running in its own process.
type childDriver struct {
	cmd  *exec.Cmd
	conn *grpc.ClientConn
	ctrl csi.ControllerClient
	node csi.NodeClient
}

// startChild runs the driver for dir in a new process and waits until it answers Probe.
func startChild(t *testing.T, dir string, configure ...func(*Config)) *childDriver {
	t.Helper()
	cfg := Config{
		Endpoint: "unix://" + filepath.Join(dir, "csi.sock"),
		Node:     node.Config{NodeID: testNode, StateDir: filepath.Join(dir, "state"), PoolDir: filepath.Join(dir, "pool"), InProcess: inprocess.Engine{}},
	}
	for _, c := range configure {
		c(&cfg)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &childDriver{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(os.Environ(), childDriverEnv+"="+string(js))
	c.cmd.Stderr = os.Stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	c.conn, err = grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.conn.Close() })
	id := csi.NewIdentityClient(c.conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := id.Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver process does not answer Probe: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.ctrl, c.node = csi.NewControllerClient(c.conn), csi.NewNodeClient(c.conn)
	return c
}

// end stops the process: SIGKILL as a crash, or SIGTERM as Kubernetes does.
func (c *childDriver) end(t *testing.T, sig syscall.Signal) {
	t.Helper()
	c.conn.Close()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if sig == syscall.SIGTERM && err != nil {
		t.Fatalf("driver exited with %v after SIGTERM", err)
	}
	if sig == syscall.SIGKILL && !errors.As(err, &ee) {
		t.Fatalf("driver ended with %v after SIGKILL", err)
	}
}

// writeSynced writes a file and fsyncs it.
func writeSynced(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRestartRestores: the plugin's process dies (SIGKILL, then SIGTERM) with a volume staged
// and published; the mounts it served are dead; the next process serves the volume again at
// the same staging path and binds the target again, with the data intact, and everything can
// then be unpublished, unstaged and checked clean by fsck.fat.
func TestRestartRestores(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	t.Cleanup(func() { detachUnder(t, dir) })
	staging := filepath.Join(dir, "staging")
	target := filepath.Join(dir, "target")
	ctx := context.Background()

	c := startChild(t, dir)
	vol, err := c.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "survivor", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	if _, err := c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	writeSynced(t, filepath.Join(target, "before-crash.txt"), "fsync'ed before the crash\n")

	for round, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		c.end(t, sig)
		if _, err := os.ReadDir(target); !errors.Is(err, syscall.ENOTCONN) {
			t.Fatalf("round %d: after %v the target should be a dead mount (ENOTCONN), got %v", round, sig, err)
		}
		c = startChild(t, dir)
		got, err := os.ReadFile(filepath.Join(target, "before-crash.txt"))
		if err != nil || string(got) != "fsync'ed before the crash\n" {
			t.Fatalf("round %d: after restart the target reads %q, %v", round, got, err)
		}
		if _, err := os.ReadDir(staging); err != nil {
			t.Fatalf("round %d: staging path after restart: %v", round, err)
		}
		if n := strings.Count(strings.Join(mountsUnder(t, dir), "\n"), dir); n != 2 {
			t.Fatalf("round %d: want exactly the staging and target mounts after restart, have %v", round, mountsUnder(t, dir))
		}
		writeSynced(t, filepath.Join(target, fmt.Sprintf("after-%d.txt", round)), fmt.Sprintf("round %d\n", round))
		stats, err := c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
		if err != nil || stats.GetVolumeCondition().GetAbnormal() {
			t.Fatalf("round %d: stats after restart: %v, %v", round, stats, err)
		}
	}

	if _, err := c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if m := mountsUnder(t, dir); len(m) != 0 {
		t.Fatalf("mounts left after unstage: %v", m)
	}
	img := filepath.Join(dir, "pool", "survivor.img")
	if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil {
		t.Fatalf("fsck.fat -n after the restarts: %v\n%s", err, out)
	}
	for name, want := range map[string]string{"before-crash.txt": "fsync'ed before the crash\n", "after-0.txt": "round 0\n", "after-1.txt": "round 1\n"} {
		out, err := exec.Command("mtype", "-i", img, "::/"+name).Output()
		if err != nil || string(out) != want {
			t.Errorf("mtype %s: %q, %v; want %q", name, out, err, want)
		}
	}
	c.end(t, syscall.SIGTERM)
}
