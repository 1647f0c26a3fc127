package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/node/usbtest"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// What the chart installs and the tests rely on.
const (
	driverName  = "fat.csi-fat.io"
	topologyKey = driverName + "/node"
	releaseName = "csi-fat"
	releaseNS   = "csi-fat"
	driverDS    = "csi-fat-node" // the chart's <fullname>-node
	driverPods  = "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/component=node"
	// mounterPods are the pods the driver serves staged volumes in.
	mounterPods = "app.kubernetes.io/name=csi-fat,app.kubernetes.io/component=mounter"
	imageClass  = "csi-fat"
	usbClass    = "csi-fat-usb"
	testImage   = "e2e.csi-fat.io/busybox:1"
	// testLabel marks every namespace and StorageClass a test makes, so leftovers of an
	// interrupted run can be found and removed.
	testLabel = "e2e.csi-fat.io/test"
)

// The host side: a small pool of its own (a tmpfs, so its capacity is known exactly; room for a
// volume grown to 1 GiB) and one fake USB stick.
const (
	defaultHostDir = "/var/lib/csi-fat-e2e/tests"
	poolBytes      = 2 << 30
	reserveBytes   = 64 << 20
	stickBytes     = 64 << 20
	stickVendor    = "E2E"
	stickModel     = "Stick"
	stickSerial    = "E2E0001"
)

const howToRun = "end-to-end tests need a local cluster: test/e2e/cluster/build.sh && test/e2e/cluster/up.sh, then CSI_FAT_E2E=1 go test ./test/e2e/... (.ci/run does this after test/run)"

// environment is the cluster with the chart installed, and the node's host side.
type environment struct {
	kube
	repo string // the repository root, holding charts/csi-fat
	node string // the cluster's only node, this machine; "" on a cluster of several
	// nodes are the cluster's nodes by name; on a cluster of several (test/e2e/cluster/up.sh 3)
	// each has network and mount namespaces of its own, and multi its host side.
	nodes    []string
	multi    map[string]*nodeHost
	hostDir  string
	poolDir  string
	stateDir string
	usb      *usbtest.Fake
	stick    *usbtest.Stick
	claims   claims // what the driver claims, and so which sidecars run
}

// env is set by TestMain when the tests run; nil when they skip.
var env *environment

// need returns the environment of a single-node cluster, or skips the test with how to run it.
// On a cluster of several nodes it skips: the test judges the node's mounts from this machine's
// mount namespace, which is none of the nodes'.
func need(t *testing.T) *environment {
	t.Helper()
	if env == nil {
		testenv.Separate(t, howToRun)
	}
	if len(env.nodes) > 1 {
		t.Skipf("needs a single-node cluster (test/e2e/cluster/up.sh 1); this one has %d nodes", len(env.nodes))
	}
	return env
}

func TestMain(m *testing.M) {
	if os.Getenv("CSI_FAT_E2E") != "1" {
		os.Exit(m.Run())
	}
	start := time.Now()
	e, err := setUp()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e set-up failed: %v\n", err)
		if e != nil {
			if err := e.tearDown(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e tear-down: %v\n", err)
			}
		}
		os.Exit(1)
	}
	fmt.Printf("e2e: chart installed in %s\n", time.Since(start).Round(100*time.Millisecond))
	env = e
	code := m.Run()
	if err := e.tearDown(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e tear-down: %v\n", err)
		code = max(code, 1)
	}
	fmt.Printf("e2e: set-up, tests and tear-down took %s\n", time.Since(start).Round(100*time.Millisecond))
	os.Exit(code)
}

// setUp finds the tools and the cluster, removes what an interrupted run left, prepares the
// host side and installs the chart. On error the returned environment (if any) needs tearDown.
func setUp() (*environment, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the tests need root: they make loop devices and a tmpfs, and judge images on the node")
	}
	e := &environment{hostDir: defaultHostDir}
	if d := os.Getenv("CSI_FAT_E2E_HOST_DIR"); d != "" {
		e.hostDir = d
	}
	e.poolDir = filepath.Join(e.hostDir, "pool")
	e.stateDir = filepath.Join(e.hostDir, "state")
	var err error
	if e.kubectl, err = findTool("kubectl"); err != nil {
		return nil, err
	}
	if e.helm, err = findTool("helm"); err != nil {
		return nil, err
	}
	e.kubeconfig = os.Getenv("KUBECONFIG")
	if e.kubeconfig == "" {
		e.kubeconfig = "/var/lib/csi-fat-e2e/admin.kubeconfig"
	}
	if _, err := os.Stat(e.kubeconfig); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w (%s)", err, howToRun)
	}
	if e.repo, err = filepath.Abs("../.."); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(e.repo, "charts", "csi-fat", "Chart.yaml")); err != nil {
		return nil, fmt.Errorf("the chart: %w", err)
	}
	if e.nodes, err = e.nodeNames(); err != nil {
		return nil, err
	}
	if len(e.nodes) > 1 {
		e.multi = map[string]*nodeHost{}
		for _, n := range e.nodes {
			e.multi[n] = newNodeHost(n)
		}
	} else if e.node, err = e.onlyNode(); err != nil {
		return nil, err
	}
	if err := e.removeLeftovers(); err != nil {
		return nil, fmt.Errorf("before the tests: %w", err)
	}
	if e.claims, err = probeDriver(); err != nil {
		return nil, err
	}
	fmt.Printf("e2e: the driver claims %s\n", e.claims)
	if err := e.prepareHost(); err != nil {
		return e, err
	}
	return e, e.installChart()
}

// findTool prefers the cluster's own build of a tool (kubectl must match the cluster's minor
// version) over PATH.
func findTool(name string) (string, error) {
	cache := os.Getenv("CSI_FAT_E2E_CACHE")
	if cache == "" {
		cache = "/var/cache/csi-fat-e2e"
	}
	p := filepath.Join(cache, "bin", name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s: not in %s/bin nor on PATH: %w", name, cache, err)
	}
	return p, nil
}

// onlyNode returns the cluster's node, which must be this machine: the tests judge the node's
// images and sticks from here.
func (e *environment) onlyNode() (string, error) {
	var nodes list[node]
	if err := e.getJSON(&nodes, "nodes"); err != nil {
		return "", fmt.Errorf("cluster not reachable (%s): %w", howToRun, err)
	}
	if len(nodes.Items) != 1 {
		return "", fmt.Errorf("want a single-node cluster, found %d nodes", len(nodes.Items))
	}
	name := nodes.Items[0].Metadata.Name
	host, err := os.Hostname()
	if err != nil {
		return "", err
	}
	if name != strings.ToLower(host) {
		return "", fmt.Errorf("the cluster's node %q is not this machine (%q)", name, host)
	}
	return name, nil
}

// prepareHost mounts the pool's tmpfs and makes the fake sysfs tree with one stick; on a cluster
// of several nodes, each node's pool.
func (e *environment) prepareHost() error {
	if e.multi != nil {
		return e.prepareNodes()
	}
	for _, d := range []string{e.poolDir, e.stateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", poolBytes),
		"csi-fat-e2e-pool", e.poolDir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount the pool's tmpfs at %s: %w: %s", e.poolDir, err, out)
	}
	var err error
	if e.usb, err = usbtest.NewHost(filepath.Join(e.hostDir, "usb")); err != nil {
		return err
	}
	e.stick, err = e.usb.Attach(stickBytes, stickVendor, stickModel, stickSerial)
	return err
}

// tearDown removes what the tests and set-up made: test namespaces and classes, the release,
// the host side.
func (e *environment) tearDown() error {
	var errs []error
	errs = append(errs, e.deleteTestObjects())
	if _, err := e.helmErr("status", releaseName, "-n", releaseNS); err == nil {
		_, err := e.helmErr("uninstall", releaseName, "-n", releaseNS, "--wait", "--timeout", "3m")
		errs = append(errs, err)
	}
	_, err := e.kubectlErr("delete", "namespace", releaseNS, "--ignore-not-found", "--timeout=3m")
	errs = append(errs, err, e.cleanHost())
	return errors.Join(errs...)
}

// deleteTestObjects deletes the labelled namespaces (with their pods, claims and snapshots) and
// classes, and waits for the volumes of those claims and the driver's snapshots to go.
func (e *environment) deleteTestObjects() error {
	_, err1 := e.kubectlErr("delete", "namespace", "-l", testLabel, "--timeout=3m")
	err2 := e.waitVolumesGone(func(p *pv) bool {
		return p.Spec.CSI != nil && p.Spec.CSI.Driver == driverName
	})
	err3 := e.waitSnapshotsGone(func(c *snapshotContent) bool { return c.Spec.Driver == driverName })
	_, err4 := e.kubectlErr("delete", "storageclass", "-l", testLabel, "--timeout=1m")
	return errors.Join(err1, err2, err3, err4)
}

// removeLeftovers clears what an interrupted run left: the release, test objects, host side.
func (e *environment) removeLeftovers() error {
	if _, err := e.helmErr("status", releaseName, "-n", releaseNS); err == nil {
		ours, err := e.helmErr("list", "-n", releaseNS, "-q", "-l", testLabel+"=true")
		if err != nil {
			return err
		}
		if !slices.Contains(strings.Fields(string(ours)), releaseName) {
			return fmt.Errorf("a release %s the tests did not make is installed in namespace %s: the tests need a cluster without one (helm uninstall %s -n %s)",
				releaseName, releaseNS, releaseName, releaseNS)
		}
		fmt.Fprintf(os.Stderr, "e2e: release %s left from an earlier run: removing it\n", releaseName)
		if err := e.tearDown(); err != nil {
			return err
		}
	}
	if err := e.deleteTestObjects(); err != nil {
		return err
	}
	return e.cleanHost()
}

// cleanHost unmounts the pool, detaches loop devices backed by files under hostDir and removes
// hostDir.
func (e *environment) cleanHost() error {
	if e.multi != nil {
		return e.cleanNodes()
	}
	var errs []error
	if e.usb != nil {
		errs = append(errs, e.usb.Close())
		e.usb, e.stick = nil, nil
	}
	if mounted(e.poolDir) {
		if out, err := exec.Command("umount", e.poolDir).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("umount %s: %w: %s", e.poolDir, err, out))
		}
	}
	errs = append(errs, detachLoopsUnder(e.hostDir))
	if mounted(e.poolDir) {
		// Never remove through a mount: the pool's images would go with it.
		return errors.Join(append(errs, fmt.Errorf("%s is still mounted: %s left in place", e.poolDir, e.hostDir))...)
	}
	if err := os.RemoveAll(e.hostDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
