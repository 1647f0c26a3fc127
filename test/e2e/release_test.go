package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// capacityPollInterval is how often the provisioner asks GetCapacity again; short, so the
// CSIStorageCapacity objects follow the tests' volumes quickly.
const capacityPollInterval = 5 * time.Second

// installChart installs the chart from the repository as a local cluster without a registry
// needs it, with the tests' pool and fake USB sticks, and waits for it and for the kubelet's
// registration of the driver.
func (e *environment) installChart() error {
	typed := []string{"logLevel=4", fmt.Sprintf("usb.enabled=%t", e.usb != nil),
		fmt.Sprintf("resizer.enabled=%t", e.claims.onlineExpansion),
		fmt.Sprintf("snapshotter.enabled=%t", e.claims.snapshots),
		// up.sh installs the snapshot CRDs, so the chart's class can be made.
		fmt.Sprintf("volumeSnapshotClass.create=%t", e.claims.snapshots)}
	strs := []string{
		"image.tag=e2e",
		"image.pullPolicy=Never",
		"registration.mode=builtin",
		"driver.poolDir=" + e.poolDir,
		"driver.stateDir=" + e.stateDir,
		fmt.Sprintf("driver.reserve=%dM", reserveBytes>>20),
		"provisioner.capacityPollInterval=" + capacityPollInterval.String(),
	}
	if e.usb != nil {
		strs = append(strs, "usb.sysfsRoot="+e.usb.SysfsRoot, "usb.byIdDir="+e.usb.ByIDDir,
			"usb.byPathDir="+e.usb.ByPathDir, "usb.devDir="+e.usb.DevDir, "usb.deviceGlob="+e.usb.Glob)
	}
	args := []string{"install", releaseName, filepath.Join(e.repo, "charts", "csi-fat"),
		"--namespace", releaseNS, "--create-namespace", "--wait", "--timeout", "5m",
		// Marks the release as the tests', so a later run removes it only if it is theirs.
		"--labels", testLabel + "=true"}
	for _, s := range typed {
		args = append(args, "--set", s)
	}
	for _, s := range strs {
		args = append(args, "--set-string", s)
	}
	if _, err := e.helmErr(args...); err != nil {
		return fmt.Errorf("%w\n%s", err, e.driverState())
	}
	// The DaemonSet is ready when the driver answers its health check, which includes the
	// registration; the kubelet's CSINode entry is what pods need, so wait for that too.
	err := poll(2*time.Minute, func() (bool, error) {
		for _, n := range e.nodes {
			if _, ok, err := e.csiNodeDriverOf(n); !ok {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("kubelet registration of %s: %w\n%s", driverName, err, e.driverState())
	}
	return nil
}

// waitVolumesGone waits until no PersistentVolume matching match is left.
func (e *environment) waitVolumesGone(match func(*pv) bool) error {
	return poll(3*time.Minute, func() (bool, error) {
		var pvs list[pv]
		if err := e.getJSON(&pvs, "pv"); err != nil {
			return false, err
		}
		var left []string
		for i := range pvs.Items {
			if match(&pvs.Items[i]) {
				left = append(left, pvs.Items[i].Metadata.Name+" ("+pvs.Items[i].Status.Phase+")")
			}
		}
		if len(left) > 0 {
			return false, fmt.Errorf("volumes left: %v", left)
		}
		return true, nil
	})
}

// waitSnapshotsGone waits until no VolumeSnapshotContent matching match is left: its snapshot
// deleted by the driver (the deletion policy the tests use is Delete). A cluster without the
// snapshot CRDs has none.
func (e *environment) waitSnapshotsGone(match func(*snapshotContent) bool) error {
	return poll(3*time.Minute, func() (bool, error) {
		var contents list[snapshotContent]
		if err := e.getJSON(&contents, "volumesnapshotcontents"); err != nil {
			if strings.Contains(err.Error(), "the server doesn't have a resource type") {
				return true, nil
			}
			return false, err
		}
		var left []string
		for i := range contents.Items {
			if c := &contents.Items[i]; match(c) {
				left = append(left, c.Metadata.Name)
			}
		}
		if len(left) > 0 {
			return false, fmt.Errorf("snapshot contents left: %v", left)
		}
		return true, nil
	})
}

// csiNodeDriver returns this node's CSINode entry of the driver, if the kubelet has one.
func (e *environment) csiNodeDriver() (entry csiNodeEntry, ok bool, err error) {
	return e.csiNodeDriverOf(e.node)
}

// csiNodeDriverOf returns a node's CSINode entry of the driver, if its kubelet has one.
func (e *environment) csiNodeDriverOf(node string) (entry csiNodeEntry, ok bool, err error) {
	var cn csiNode
	if err := e.getJSON(&cn, "csinode", node); err != nil {
		return entry, false, err
	}
	i := slices.IndexFunc(cn.Spec.Drivers, func(d csiNodeEntry) bool { return d.Name == driverName })
	if i < 0 {
		return entry, false, fmt.Errorf("CSINode %s lists no %s", node, driverName)
	}
	return cn.Spec.Drivers[i], true, nil
}
