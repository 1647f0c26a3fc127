package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestInstall checks what the chart's installation gives the cluster: a ready driver, its
// CSIDriver object as the chart defines it, the kubelet's registration with the node's topology,
// and capacity published for both StorageClasses.
func TestInstall(t *testing.T) {
	e := need(t)

	var status struct {
		Info struct {
			Status string `json:"status"`
		} `json:"info"`
	}
	if out, err := e.helmErr("status", releaseName, "-n", releaseNS, "-o", "json"); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(out, &status); err != nil {
		t.Fatal(err)
	}
	if status.Info.Status != "deployed" {
		t.Errorf("release %s is %q, want deployed", releaseName, status.Info.Status)
	}

	var ds daemonSet
	e.getJSONT(t, &ds, "daemonset", "-n", releaseNS, driverDS)
	if ds.Status.DesiredNumberScheduled != 1 || ds.Status.NumberReady != 1 {
		t.Errorf("DaemonSet %s: %d of %d pods ready, want 1 of 1", driverDS, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	}

	t.Run("CSIDriver", func(t *testing.T) {
		var live map[string]any
		e.getJSONT(t, &live, "csidriver", driverName)
		want := e.installedObject(t, "CSIDriver", driverName)
		liveSpec, _ := live["spec"].(map[string]any)
		wantSpec, _ := want["spec"].(map[string]any)
		if len(wantSpec) == 0 {
			t.Fatalf("the release's CSIDriver has no spec: %v", want)
		}
		// The live object also holds the API server's defaults for fields the chart leaves out.
		for k, v := range wantSpec {
			if !reflect.DeepEqual(liveSpec[k], v) {
				t.Errorf("CSIDriver spec.%s = %v, the chart says %v", k, liveSpec[k], v)
			}
		}
		// What the driver's design depends on, whatever the chart says.
		var d csiDriver
		e.getJSONT(t, &d, "csidriver", driverName)
		if d.Spec.AttachRequired == nil || *d.Spec.AttachRequired {
			t.Error("attachRequired is not false: node-local volumes have no ControllerPublish")
		}
		if d.Spec.StorageCapacity == nil || !*d.Spec.StorageCapacity {
			t.Error("storageCapacity is not true: the scheduler would ignore the nodes' capacity")
		}
		if d.Spec.FSGroupPolicy != "File" {
			t.Errorf("fsGroupPolicy %q, want File", d.Spec.FSGroupPolicy)
		}
	})

	t.Run("CSINode", func(t *testing.T) {
		entry, ok, err := e.csiNodeDriver()
		if !ok {
			t.Fatal(err)
		}
		if entry.NodeID != e.node {
			t.Errorf("CSINode node ID %q, want the node name %q", entry.NodeID, e.node)
		}
		if !slices.Equal(entry.TopologyKeys, []string{topologyKey}) {
			t.Errorf("CSINode topology keys %v, want [%s]", entry.TopologyKeys, topologyKey)
		}
		if entry.Allocatable == nil || entry.Allocatable.Count == nil || *entry.Allocatable.Count != 64 {
			t.Errorf("CSINode allocatable %+v, want count 64 (the chart's maxVolumes)", entry.Allocatable)
		}
		var n node
		e.getJSONT(t, &n, "node", e.node)
		if got := n.Metadata.Labels[topologyKey]; got != e.node {
			t.Errorf("node label %s=%q, want %q", topologyKey, got, e.node)
		}
	})

	// The sidecars the driver's claims call for run and are ready; the others are absent.
	t.Run("Sidecars", func(t *testing.T) {
		var pods list[pod]
		e.getJSONT(t, &pods, "pods", "-n", releaseNS, "-l", driverPods)
		if len(pods.Items) != 1 {
			t.Fatalf("%d driver pods, want 1", len(pods.Items))
		}
		p := pods.Items[0]
		want := map[string]bool{"csi-fat": true, "csi-provisioner": true,
			"csi-resizer": e.claims.onlineExpansion, "csi-snapshotter": e.claims.snapshots}
		for _, c := range p.Spec.Containers {
			if on, known := want[c.Name]; known && !on {
				t.Errorf("container %s runs, but the driver does not claim its feature (%s)", c.Name, e.claims)
			}
		}
		for name, on := range want {
			if !on {
				continue
			}
			i := slices.IndexFunc(p.Status.ContainerStatuses, func(s containerStatus) bool { return s.Name == name })
			if i < 0 || !p.Status.ContainerStatuses[i].Ready {
				t.Errorf("container %s of pod %s is not ready", name, p.Metadata.Name)
			}
		}
		if e.claims.snapshots {
			var vsc struct {
				Driver         string `json:"driver"`
				DeletionPolicy string `json:"deletionPolicy"`
			}
			e.getJSONT(t, &vsc, "volumesnapshotclass", snapshotClass)
			if vsc.Driver != driverName || vsc.DeletionPolicy != "Delete" {
				t.Errorf("VolumeSnapshotClass %s: driver %q, deletion policy %q", snapshotClass, vsc.Driver, vsc.DeletionPolicy)
			}
		}
	})

	t.Run("CSIStorageCapacity", func(t *testing.T) {
		// Volumes of earlier tests are gone (each test waits for that), so the pool is empty
		// and the stick free: the capacity is exactly the pool less the reserve, and the stick.
		want := map[string]int64{imageClass: poolBytes - reserveBytes, usbClass: stickBytes}
		e.waitFor(t, "", "capacity of both classes published", 2*time.Minute, func() (bool, error) {
			return e.capacityIs(want)
		})
	})
}

// capacityIs tells whether the node's CSIStorageCapacity objects of the classes in want say the
// capacity and maximum volume size want gives.
func (e *environment) capacityIs(want map[string]int64) (bool, error) {
	return e.capacityIsOn(e.node, want)
}

// capacityIsOn is capacityIs for a node of the cluster.
func (e *environment) capacityIsOn(node string, want map[string]int64) (bool, error) {
	var caps list[csiStorageCapacity]
	if err := e.getJSON(&caps, "csistoragecapacities", "-n", releaseNS); err != nil {
		return false, err
	}
	for class, bytes := range want {
		i := slices.IndexFunc(caps.Items, func(c csiStorageCapacity) bool {
			return c.StorageClassName == class && c.NodeTopology != nil &&
				reflect.DeepEqual(c.NodeTopology.MatchLabels, map[string]string{topologyKey: node})
		})
		if i < 0 {
			return false, fmt.Errorf("no CSIStorageCapacity for class %s and node %s", class, node)
		}
		c := caps.Items[i]
		got, err := parseQuantity(c.Capacity)
		if err != nil {
			return false, err
		}
		max, err := parseQuantity(c.MaximumVolumeSize)
		if err != nil {
			return false, err
		}
		if got != bytes || max != bytes {
			return false, fmt.Errorf("class %s: capacity %s, maximum volume size %s, want %d bytes", class, c.Capacity, c.MaximumVolumeSize, bytes)
		}
	}
	return true, nil
}

// installedObject returns an object of the release as Helm installed it, as JSON.
func (e *environment) installedObject(t *testing.T, kind, name string) map[string]any {
	t.Helper()
	manifest, err := e.helmErr("get", "manifest", releaseName, "-n", releaseNS)
	if err != nil {
		t.Fatal(err)
	}
	// kubectl turns the YAML into JSON without sending it anywhere.
	out, err := e.run(context.Background(), bytes.NewReader(manifest), e.kubectl, "create", "--dry-run=client", "-o", "json", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	// One JSON object per manifest, one after the other.
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var o map[string]any
		if err := dec.Decode(&o); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		meta, _ := o["metadata"].(map[string]any)
		if o["kind"] == kind && meta["name"] == name {
			return o
		}
	}
	t.Fatalf("the release has no %s %s", kind, name)
	return nil
}
