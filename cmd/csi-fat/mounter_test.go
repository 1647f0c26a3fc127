package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// plainDriver is `csi-fat driver` run as a process on a plain host (no Kubernetes in its
// environment, so --mounter=auto means process).
type plainDriver struct {
	cmd     *exec.Cmd
	conn    *grpc.ClientConn
	node    csi.NodeClient
	ctrl    csi.ControllerClient
	metrics string
	log     string // its stderr
}

func (d *plainDriver) logText() string {
	b, _ := os.ReadFile(d.log)
	return string(b)
}

func startPlainDriver(t *testing.T, bin, dir string) *plainDriver {
	t.Helper()
	socket := filepath.Join(dir, "csi.sock")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &plainDriver{metrics: l.Addr().String(), log: filepath.Join(t.TempDir(), "driver.log")}
	l.Close()
	logFile, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	d.cmd = exec.Command(bin, "driver", "--endpoint", "unix://"+socket, "--node-id", "plain", "--pool-dir", filepath.Join(dir, "pool"),
		"--state-dir", filepath.Join(dir, "state"), "--reserve", "0", "--metrics-address", d.metrics, "-v", "2")
	d.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	d.cmd.Stderr = logFile
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			d.cmd.Wait()
		}
	})
	if d.conn, err = grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.conn.Close() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = csi.NewIdentityClient(d.conn).Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("driver does not answer: %v\n%s", err, d.logText())
		}
	}
	d.node, d.ctrl = csi.NewNodeClient(d.conn), csi.NewControllerClient(d.conn)
	return d
}

func (d *plainDriver) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + d.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestPlainHostDriverRestart: the real binary, on a plain host, serves a volume through a
// mounter process; a SIGKILL of the driver leaves the mount working for an application that
// keeps it busy; the next driver adopts it, reports its metrics from the mounter, and unstages it.
func TestPlainHostDriverRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse")
	}
	bin := buildCsiFat(t)
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	ctx := context.Background()
	rw := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER}}

	t.Cleanup(func() {
		// After a failure: the mounter lives on in its own session; its session ends once
		// its mounts are gone.
		unix.Unmount(target, unix.MNT_DETACH)
		unix.Unmount(staging, unix.MNT_DETACH)
	})
	d := startPlainDriver(t, bin, dir)
	vol, err := d.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "plain", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	if _, err := d.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: rw}); err != nil {
		t.Fatalf("stage: %v\n%s", err, d.logText())
	}
	if _, err := d.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: rw}); err != nil {
		t.Fatal(err)
	}
	// An application holds a file open on the mount: the mount is busy.
	f, err := os.Create(filepath.Join(target, "busy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(s string) {
		t.Helper()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	write("before\n")
	d.cmd.Process.Kill()
	d.cmd.Wait()
	write("while no driver runs\n")

	d = startPlainDriver(t, bin, dir)
	write("after the restart\n")
	st, err := d.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || st.GetVolumeCondition().GetAbnormal() {
		t.Fatalf("stats after adoption: %v, %v\n%s", st, err, d.logText())
	}
	if m := d.scrape(t); !strings.Contains(m, fmt.Sprintf(`csi_fat_volume_device_requests_total{op="write",volume_id=%q}`, id)) {
		t.Errorf("no device metrics of the adopted volume:\n%s", m)
	}
	f.Close()
	if got, err := os.ReadFile(filepath.Join(target, "busy.txt")); err != nil || string(got) != "before\nwhile no driver runs\nafter the restart\n" {
		t.Fatalf("busy.txt: %q, %v", got, err)
	}
	if _, err := d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(staging, &sfs); err == nil && sfs.Type == 0x65735546 {
		t.Fatal("still a FUSE mount after unstage")
	}
	if socks, _ := filepath.Glob(filepath.Join(dir, "state", "mounters", "*.sock")); len(socks) != 0 {
		t.Fatalf("mounter sockets left: %v", socks)
	}
	if out, err := exec.Command("fsck.fat", "-n", filepath.Join(dir, "pool", "plain.img")).CombinedOutput(); err != nil {
		t.Fatalf("fsck.fat -n: %v\n%s", err, out)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("driver exit: %v", err)
	}
}
