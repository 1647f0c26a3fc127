package driver

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"
)

// idGen makes volume IDs of this driver's form that name no volume, so that sanity's
// "unknown volume" cases reach the look-up rather than stopping at parsing; its invalid IDs are
// of the form with a name the driver never issues.
type idGen struct{ n atomic.Int64 }

func (g *idGen) GenerateUniqueValidVolumeID() string {
	return volume.ID{Pool: volume.PoolImage, Node: testNode, Name: fmt.Sprintf("no-such-volume-%d", g.n.Add(1))}.String()
}
func (g *idGen) GenerateInvalidVolumeID() string {
	return volume.PoolImage + ":" + testNode + ":../no-such-volume"
}
func (g *idGen) GenerateUniqueValidNodeID() string { return fmt.Sprintf("node-%d", g.n.Add(1)) }
func (g *idGen) GenerateInvalidNodeID() string     { return "no-such-node" }

const sanityVolumeSize = 64 << 20

// sanityConfig configures a run against td. realisticIDs chooses idGen; without it the run
// uses csi-sanity's own default IDs ("fake-vol-id-…"), as csi-sanity run from outside does.
func sanityConfig(td *testDriver, params map[string]string, realisticIDs bool) sanity.TestConfig {
	cfg := sanity.NewTestConfig()
	cfg.Address = td.endpoint
	cfg.TargetPath = filepath.Join(td.dir, "sanity-target")
	cfg.StagingPath = filepath.Join(td.dir, "sanity-staging")
	cfg.TestVolumeSize = sanityVolumeSize
	cfg.TestVolumeParameters = params
	if realisticIDs {
		cfg.IDGen = &idGen{}
	}
	// csi-test v5.4's Connect waits for a change away from the state it reads after dialling; a
	// connection that is already ready by then never changes, and Connect times out after a
	// minute. A handshake that takes a moment keeps the connection from getting ready first.
	slow := grpc.WithTransportCredentials(slowHandshake{insecure.NewCredentials()})
	cfg.DialOptions = []grpc.DialOption{slow, grpc.WithAuthority("localhost")}
	cfg.ControllerDialOptions = cfg.DialOptions
	return cfg
}

// slowHandshake delays the client's handshake by half a second; see sanityConfig.
type slowHandshake struct {
	credentials.TransportCredentials
}

func (s slowHandshake) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	select {
	case <-time.After(500 * time.Millisecond):
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	return s.TransportCredentials.ClientHandshake(ctx, authority, conn)
}

func (s slowHandshake) Clone() credentials.TransportCredentials {
	return slowHandshake{s.TransportCredentials.Clone()}
}

// TestSanity runs csi-sanity against real servers on unix sockets: the image pool (sparse
// image files) with realistic IDs and with csi-sanity's default IDs, and the USB pool on loop
// devices behind a fake sysfs tree, likewise. Volumes are served through real FUSE mounts and
// bind mounts. Every capability the driver claims is tested; specs are skipped only for those it
// does not claim.
func TestSanity(t *testing.T) {
	requireFUSE(t)
	imageParams := map[string]string{volume.ParamPool: volume.PoolImage, volume.ParamMode: volume.ModeFlush}
	// Expansion: with realistic IDs within the default room (FAT16 of 2 KiB clusters: up to
	// 128 MiB), with csi-sanity's IDs to the StorageClass's maxSize, 16 times the size.
	growable := map[string]string{volume.ParamPool: volume.PoolImage, volume.ParamMode: volume.ModeFlush, volume.ParamMaxSize: "1Gi"}
	for _, realistic := range []bool{true, false} {
		params, expandTo := imageParams, int64(96<<20)
		if !realistic {
			params, expandTo = growable, 1<<30
		}
		cfg := sanityConfig(startDriver(t, "", nil), params, realistic)
		cfg.TestVolumeExpandSize = expandTo
		Describe(fmt.Sprintf("image pool, realistic IDs %v", realistic), func() { sanity.GinkgoTest(&cfg) })
	}

	if why := usbtest.Available(); why != "" {
		t.Errorf("the usb pool's sanity run cannot run: %s", why)
	} else {
		usbParams := map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamReclaim: volume.ReclaimWipe}
		for _, realistic := range []bool{true, false} {
			fake := usbtest.New(t)
			for i := 0; i < 8; i++ {
				fake.Add(t, sanityVolumeSize, "Fake", "Stick", fmt.Sprintf("SANITY%v%04d", realistic, i))
			}
			cfg := sanityConfig(startDriver(t, "", withUSB(fake)), usbParams, realistic)
			cfg.TestVolumeExpandSize = sanityVolumeSize // a device does not grow: expanding to its size is all there is
			Describe(fmt.Sprintf("usb pool, realistic IDs %v", realistic), func() { sanity.GinkgoTest(&cfg) })
		}
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "csi-fat sanity")
}
