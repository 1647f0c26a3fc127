package chart

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// sameSocket fails the test unless the container reaches the driver's socket through the host
// directory the driver serves it in.
func sameSocket(t *testing.T, pod podSpec, c container) {
	t.Helper()
	dh, _ := pod.hostPathOf(pod.container(t, "csi-fat"), "/csi")
	if h, _ := pod.hostPathOf(c, "/csi"); h == "" || h != dh {
		t.Errorf("%s /csi is host %q, the driver's %q", c.Name, h, dh)
	}
}

// unprivileged fails the test if the container is privileged: a sidecar only talks to the API
// server and the socket.
func unprivileged(t *testing.T, c container) {
	t.Helper()
	if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
		t.Errorf("%s is privileged", c.Name)
	}
}

func TestResizerSidecar(t *testing.T) {
	pod := render(t).nodePlugin(t)
	c := pod.container(t, "csi-resizer")
	if c.Image != "registry.k8s.io/sig-storage/csi-resizer:v2.3.0" {
		t.Errorf("resizer image %q", c.Image)
	}
	c.checkFlags(t, map[string]string{
		"csi-address": "/csi/csi.sock",
		// Set explicitly, --timeout would also be ControllerExpandVolume's.
		"timeout": "60s",
		// Online expansion has no in-use errors: no watch of every pod from every node.
		"handle-volume-inuse-error": "false",
		"v":                         "2",
	})
	// The driver claims node expansion only: the resizer never calls a driver for a resize, so
	// one elected among the nodes' resizers serves all, and none races another over a claim.
	if !c.hasArg("--leader-election") {
		t.Errorf("resizer runs without leader election: %v", c.Args)
	}
	sameSocket(t, pod, c)
	unprivileged(t, c)

	custom := render(t, "--set", "resizer.timeout=5m", "--set", "logLevel=5",
		"--set-json", `resizer.extraArgs=["--workers=2"]`).nodePlugin(t).container(t, "csi-resizer")
	if custom.flag(t, "timeout") != "5m" || custom.flag(t, "v") != "5" {
		t.Errorf("resizer args %v, want --timeout=5m and --v=5", custom.Args)
	}
	if custom.Args[len(custom.Args)-1] != "--workers=2" {
		t.Errorf("resizer args %v, want the extra argument last", custom.Args)
	}
}

func TestSnapshotterSidecar(t *testing.T) {
	pod := render(t).nodePlugin(t)
	c := pod.container(t, "csi-snapshotter")
	if c.Image != "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0" {
		t.Errorf("snapshotter image %q", c.Image)
	}
	// Distributed snapshotting: the contents labelled with this node, by $NODE_NAME.
	if !c.hasArg("--node-deployment") {
		t.Errorf("snapshotter lacks --node-deployment; args %v", c.Args)
	}
	if got := c.envFieldPath("NODE_NAME"); got != "spec.nodeName" {
		t.Errorf("snapshotter NODE_NAME from %q, want spec.nodeName (the label is the Node's name)", got)
	}
	c.checkFlags(t, map[string]string{
		"csi-address":   "/csi/csi.sock",
		"feature-gates": "CSIVolumeGroupSnapshot=false",
		"timeout":       "60s",
		"v":             "2",
	})
	// The snapshotter refuses leader election with --node-deployment.
	if c.flag(t, "leader-election") != "" || c.hasArg("--leader-election") {
		t.Errorf("snapshotter runs leader election: %v", c.Args)
	}
	sameSocket(t, pod, c)
	unprivileged(t, c)

	custom := render(t, "--set", "snapshotter.timeout=3m", "--set", "image.pullPolicy=Never",
		"--set-json", `snapshotter.extraArgs=["--worker-threads=2"]`).nodePlugin(t)
	s := custom.container(t, "csi-snapshotter")
	if s.flag(t, "timeout") != "3m" || s.Args[len(s.Args)-1] != "--worker-threads=2" {
		t.Errorf("snapshotter args %v, want --timeout=3m and the extra argument last", s.Args)
	}
	for _, name := range []string{"csi-resizer", "csi-snapshotter"} {
		if got := custom.container(t, name).ImagePullPolicy; got != "Never" {
			t.Errorf("%s imagePullPolicy %q, want image.pullPolicy's Never", name, got)
		}
	}
	own := render(t, "--set", "snapshotter.image.pullPolicy=Always").nodePlugin(t)
	if got := own.container(t, "csi-snapshotter").ImagePullPolicy; got != "Always" {
		t.Errorf("snapshotter imagePullPolicy %q, want its own Always", got)
	}
}

// TestSidecarsCanBeLeftOut: each sidecar goes with its switch, and the other stays.
func TestSidecarsCanBeLeftOut(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  []string
	}{
		{nil, []string{"csi-fat", "csi-provisioner", "csi-resizer", "csi-snapshotter", "node-driver-registrar"}},
		{[]string{"--set", "resizer.enabled=false"}, []string{"csi-fat", "csi-provisioner", "csi-snapshotter", "node-driver-registrar"}},
		{[]string{"--set", "snapshotter.enabled=false"}, []string{"csi-fat", "csi-provisioner", "csi-resizer", "node-driver-registrar"}},
	} {
		if got := render(t, c.flags...).nodePlugin(t).containerNames(); !slices.Equal(got, c.want) {
			t.Errorf("%v: containers %v, want %v", c.flags, got, c.want)
		}
	}
}

type volumeSnapshotClass struct {
	Metadata       objectMeta        `json:"metadata"`
	Driver         string            `json:"driver"`
	DeletionPolicy string            `json:"deletionPolicy"`
	Parameters     map[string]string `json:"parameters"`
}

func TestVolumeSnapshotClass(t *testing.T) {
	if n := len(render(t).all("VolumeSnapshotClass")); n != 0 {
		t.Errorf("%d VolumeSnapshotClasses rendered by default; its kind needs the cluster's CRDs", n)
	}

	r := render(t, "--set", "volumeSnapshotClass.create=true")
	var vsc volumeSnapshotClass
	o := r.get(t, "VolumeSnapshotClass", &vsc)
	if o.JSON == nil || !strings.Contains(string(o.JSON), `"apiVersion":"snapshot.storage.k8s.io/v1"`) {
		t.Errorf("VolumeSnapshotClass %s, want apiVersion snapshot.storage.k8s.io/v1", o.JSON)
	}
	if vsc.Metadata.Name != "csi-fat" || vsc.Driver != "fat.csi-fat.io" || vsc.DeletionPolicy != "Delete" {
		t.Errorf("VolumeSnapshotClass %s driver %q deletionPolicy %q, want csi-fat, fat.csi-fat.io, Delete",
			vsc.Metadata.Name, vsc.Driver, vsc.DeletionPolicy)
	}
	if _, ok := vsc.Metadata.Annotations["snapshot.storage.kubernetes.io/is-default-class"]; ok || len(vsc.Parameters) != 0 {
		t.Errorf("default class annotations %v parameters %v, want neither", vsc.Metadata.Annotations, vsc.Parameters)
	}

	// A key such as "n" stays a string key (YAML 1.1 would read a bare n as false).
	custom := render(t, "--set", "volumeSnapshotClass.create=true", "--set", "volumeSnapshotClass.name=fat-snaps",
		"--set", "volumeSnapshotClass.isDefault=true", "--set", "volumeSnapshotClass.deletionPolicy=Retain",
		"--set", "driverName=fat.example.org", "--set-string", "volumeSnapshotClass.parameters.n=1")
	vsc = volumeSnapshotClass{}
	custom.get(t, "VolumeSnapshotClass", &vsc)
	if vsc.Metadata.Name != "fat-snaps" || vsc.Driver != "fat.example.org" || vsc.DeletionPolicy != "Retain" ||
		vsc.Metadata.Annotations["snapshot.storage.kubernetes.io/is-default-class"] != "true" ||
		!maps.Equal(vsc.Parameters, map[string]string{"n": "1"}) {
		t.Errorf("custom VolumeSnapshotClass %+v", vsc)
	}

	// Without the snapshotter no driver would take its snapshots.
	off := render(t, "--set", "volumeSnapshotClass.create=true", "--set", "snapshotter.enabled=false")
	if n := len(off.all("VolumeSnapshotClass")); n != 0 {
		t.Errorf("%d VolumeSnapshotClasses rendered with the snapshotter off", n)
	}
}
