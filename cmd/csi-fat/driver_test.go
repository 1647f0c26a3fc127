package main

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestDriverUsage: --help lists every option and exits 0; bad arguments exit 2, a bad
// configuration 1, each with a message.
func TestDriverUsage(t *testing.T) {
	bin := buildCsiFat(t)
	out, err := exec.Command(bin, "driver", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("driver --help: %v\n%s", err, out)
	}
	fs, _ := newDriverFlagSet(new(strings.Builder))
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(out), "-"+f.Name) {
			t.Errorf("--help does not list -%s", f.Name)
		}
	})
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"driver", "stray"}, 2, "unexpected argument"},
		{[]string{"driver", "--no-such-flag"}, 2, "no-such-flag"},
		{[]string{"driver", "--reserve", "lots"}, 2, "reserve"},
		{[]string{"driver", "--max-volumes", "-1"}, 2, "negative"},
		{[]string{"driver", "--endpoint", "tcp://127.0.0.1:1", "--node-id", "n", "--pool-dir", t.TempDir(), "--state-dir", t.TempDir()}, 1, "unix://"},
		{[]string{"driver", "--endpoint", "unix://" + filepath.Join(t.TempDir(), "s"), "--node-id", "bad/node", "--pool-dir", t.TempDir(), "--state-dir", t.TempDir()}, 1, "node ID"},
		{[]string{"driver", "--endpoint", "unix://" + filepath.Join(t.TempDir(), "s"), "--node-id", "n", "--driver-name", "-bad-", "--pool-dir", t.TempDir(), "--state-dir", t.TempDir()}, 1, "driver name"},
		{[]string{"driver", "--endpoint", "unix://" + filepath.Join(t.TempDir(), "s"), "--node-id", "n", "--pool-dir", "relative", "--state-dir", t.TempDir()}, 1, "absolute"},
		{[]string{"driver", "--endpoint", "unix://" + filepath.Join(t.TempDir(), "s"), "--node-id", "n", "--pool-dir", t.TempDir(), "--state-dir", t.TempDir(),
			"--usb-pool", "--usb-allow-vendor", "[bad"}, 1, "pattern"},
		{[]string{"driver", "--media-pool", "--media-discovery", "--media-discovery-parameter", "mode"}, 2, "key=value"},
		{[]string{"driver", "--media-pool", "--media-discovery"}, 2, "API server"}, // not in a cluster
	} {
		cmd := exec.Command(bin, tt.args...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != tt.code || !strings.Contains(string(out), tt.want) {
			t.Errorf("csi-fat %v: exit %d, output %q; want exit %d mentioning %q", tt.args, code, out, tt.code, tt.want)
		}
	}
}

// TestDriverCommand runs `csi-fat driver` as a process: it answers on its socket, serves
// metrics, and exits 0 on SIGTERM, removing its socket.
func TestDriverCommand(t *testing.T) {
	testenv.RequireRoot(t, "the driver's pool and state directories")
	bin := buildCsiFat(t)
	dir := t.TempDir()
	socket := filepath.Join(dir, "csi.sock")
	cmd := exec.Command(bin, "driver", "--endpoint", "unix://"+socket, "--node-id", "cmd-node", "--driver-name", "fat.test.io",
		"--pool-dir", filepath.Join(dir, "pool"), "--state-dir", filepath.Join(dir, "state"), "--reserve", "0", "--max-volumes", "3",
		"--metrics-address", "127.0.0.1:0", "-v", "4")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var info *csi.GetPluginInfoResponse
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err = csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || info.GetName() != "fat.test.io" {
		t.Fatalf("GetPluginInfo: %v, %v\n%s", info, err, stderr.String())
	}
	ni, err := csi.NewNodeClient(conn).NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || ni.GetNodeId() != "cmd-node" || ni.GetMaxVolumesPerNode() != 3 || ni.GetAccessibleTopology().GetSegments()["fat.test.io/node"] != "cmd-node" {
		t.Fatalf("NodeGetInfo: %v, %v", ni, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("driver exited with %v after SIGTERM\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "NodeGetInfo") {
		t.Errorf("-v 4 logged no calls:\n%s", stderr.String())
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("socket left after exit: %v", err)
	}
}
