package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// claims is what the driver says it can do, as the sidecars and the kubelet learn it.
type claims struct {
	// onlineExpansion: NodeExpandVolume (node EXPAND_VOLUME) and the ONLINE expansion plugin
	// capability: what a resize of a volume in use needs when the volume grows on its node.
	onlineExpansion bool
	snapshots       bool // CreateSnapshot and DeleteSnapshot (CREATE_DELETE_SNAPSHOT)
	clones          bool // CreateVolume from a volume (CLONE_VOLUME)
}

// The sidecars exit at once when the driver lacks what they are for, so the tests install each
// only where the driver claims its feature; a test of a feature the driver does not claim fails
// with what is missing.
func (c claims) String() string {
	return fmt.Sprintf("online expansion %t, snapshots %t, clones %t", c.onlineExpansion, c.snapshots, c.clones)
}

// probeDriver starts the driver binary the cluster's image was built from (images.sh puts both in
// the cache) on a socket and an empty pool of its own, asks it what it claims, and stops it.
func probeDriver() (claims, error) {
	bin, err := findTool("csi-fat")
	if err != nil {
		return claims{}, err
	}
	dir, err := os.MkdirTemp("", "csi-fat-e2e-probe-")
	if err != nil {
		return claims{}, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "csi.sock")
	cmd := exec.Command(bin, "driver", "--endpoint=unix://"+sock, "--node-id=probe",
		"--pool-dir="+filepath.Join(dir, "pool"), "--state-dir="+filepath.Join(dir, "state"), "--reserve=0")
	out, err := os.Create(filepath.Join(dir, "driver.log"))
	if err != nil {
		return claims{}, err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return claims{}, fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	c, err := askClaims(sock, exited)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "driver.log"))
		return claims{}, fmt.Errorf("asking %s what it claims: %w\ndriver log:\n%s", bin, err, log)
	}
	return c, nil
}

// askClaims waits until the driver on sock answers Probe ready, then reads its capabilities.
func askClaims(sock string, exited <-chan error) (claims, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case err := <-exited:
			return claims{}, fmt.Errorf("the driver exited: %v", err)
		case <-ctx.Done():
			return claims{}, errors.New("no socket within a minute")
		case <-time.After(100 * time.Millisecond):
		}
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return claims{}, err
	}
	defer conn.Close()
	identity := csi.NewIdentityClient(conn)
	for {
		p, err := identity.Probe(ctx, &csi.ProbeRequest{})
		if err == nil && p.GetReady().GetValue() {
			break
		}
		if ctx.Err() != nil {
			return claims{}, fmt.Errorf("not ready within a minute: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	plugin, err := identity.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		return claims{}, err
	}
	online := false
	for _, c := range plugin.GetCapabilities() {
		if c.GetVolumeExpansion().GetType() == csi.PluginCapability_VolumeExpansion_ONLINE {
			online = true
		}
	}
	ctrl, err := csi.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return claims{}, err
	}
	rpcs := map[csi.ControllerServiceCapability_RPC_Type]bool{}
	for _, c := range ctrl.GetCapabilities() {
		rpcs[c.GetRpc().GetType()] = true
	}
	node, err := csi.NewNodeClient(conn).NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		return claims{}, err
	}
	nodeExpand := false
	for _, c := range node.GetCapabilities() {
		if c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_EXPAND_VOLUME {
			nodeExpand = true
		}
	}
	return claims{
		onlineExpansion: online && nodeExpand,
		snapshots:       rpcs[csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT],
		clones:          rpcs[csi.ControllerServiceCapability_RPC_CLONE_VOLUME],
	}, nil
}

// needClaim fails the test unless the driver claims the feature: the chart then runs no sidecar
// for it, and the test cannot prove anything.
func (e *environment) needClaim(t *testing.T, claimed bool, feature string) {
	t.Helper()
	if !claimed {
		t.Fatalf("the driver does not claim %s (it claims: %s): the chart was installed without the sidecar for it", feature, e.claims)
	}
}
