package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/internal/judge"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// The tests of this file need a cluster of three nodes (test/e2e/cluster/up.sh 3), each with its
// own pool: node-<i> holds i GiB (nodes_test.go). They prove what one node cannot: where the
// scheduler and the sidecars put volumes, and that the nodes' drivers and sidecars keep to their
// own node's volumes.

// needNodes returns the environment of a cluster of three nodes or more, or skips the test.
func needNodes(t *testing.T) *environment {
	t.Helper()
	if env == nil {
		testenv.Separate(t, howToRun)
	}
	if len(env.nodes) < 3 {
		t.Skipf("needs a cluster of three nodes (test/e2e/cluster/up.sh 3); this one has %d", len(env.nodes))
	}
	return env
}

// waitCapacities waits until every node's CSIStorageCapacity of the image class says what its
// pool less the reserve leaves.
func (e *environment) waitCapacities(t *testing.T, ns string) {
	t.Helper()
	e.waitFor(t, ns, "every node's capacity published", 2*time.Minute, func() (bool, error) {
		for _, n := range e.nodes {
			if ok, err := e.capacityIsOn(n, map[string]int64{imageClass: e.multi[n].capacity()}); !ok {
				return false, fmt.Errorf("node %s: %w", n, err)
			}
		}
		return true, nil
	})
}

// claimEvents lists the events of a claim.
func (e *environment) claimEvents(t *testing.T, ns, claim string) []event {
	t.Helper()
	var evs list[event]
	e.getJSONT(t, &evs, "events", "-n", ns, "--field-selector", "involvedObject.kind=PersistentVolumeClaim,involvedObject.name="+claim)
	return evs.Items
}

// podEvents lists the events of a pod.
func (e *environment) podEvents(t *testing.T, ns, pod string) []event {
	t.Helper()
	var evs list[event]
	e.getJSONT(t, &evs, "events", "-n", ns, "--field-selector", "involvedObject.kind=Pod,involvedObject.name="+pod)
	return evs.Items
}

// checkOnNode checks that a claim's volume and the pod using it are on node: the pod runs there,
// the volume's node affinity and handle name it, its image is in that node's pool and in no
// other's.
func (e *environment) checkOnNode(t *testing.T, ns, podName string, v pv, node string) string {
	t.Helper()
	p := e.getPod(t, ns, podName)
	if p.Spec.NodeName != node {
		t.Errorf("pod %s runs on %s, want %s", podName, p.Spec.NodeName, node)
	}
	if got, want := v.nodeAffinity(), topologyKey+" in ["+node+"]"; got != want {
		t.Errorf("volume %s node affinity %q, want %q", v.Metadata.Name, got, want)
	}
	img, err := e.imageFileOn(node, v.Spec.CSI.VolumeHandle)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(img); err != nil {
		t.Errorf("volume %s: no image in node %s's pool: %v", v.Metadata.Name, node, err)
	}
	_, name, _ := strings.Cut(strings.TrimPrefix(v.Spec.CSI.VolumeHandle, "image:"), ":")
	for _, other := range e.nodes {
		if other == node {
			continue
		}
		if _, err := os.Stat(e.multi[other].poolDir + "/" + name + ".img"); err == nil {
			t.Errorf("volume %s has an image in node %s's pool too", v.Metadata.Name, other)
		}
	}
	return img
}

// waitUnstagedOn waits until a node no longer lists a volume in use: its kubelet has unstaged it
// and the driver has written it back.
func (e *environment) waitUnstagedOn(t *testing.T, ns, node, handle string) {
	t.Helper()
	e.waitFor(t, ns, "volume "+handle+" unstaged on "+node, 2*time.Minute, func() (bool, error) {
		var n struct {
			Status struct {
				VolumesInUse []string `json:"volumesInUse"`
			} `json:"status"`
		}
		if err := e.getJSON(&n, "node", node); err != nil {
			return false, err
		}
		for _, v := range n.Status.VolumesInUse {
			if strings.HasSuffix(v, "^"+handle) {
				return false, fmt.Errorf("node %s lists %s in use", node, v)
			}
		}
		return true, nil
	})
}

// TestNodesCapacity checks each node's CSIStorageCapacity of the image class: its own pool less
// the reserve, different on each node.
func TestNodesCapacity(t *testing.T) {
	e := needNodes(t)
	e.waitCapacities(t, "")
	var ds daemonSet
	e.getJSONT(t, &ds, "daemonset", "-n", releaseNS, driverDS)
	if ds.Status.DesiredNumberScheduled != len(e.nodes) || ds.Status.NumberReady != len(e.nodes) {
		t.Errorf("DaemonSet %s: %d of %d pods ready, want %d", driverDS, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled, len(e.nodes))
	}
	for _, n := range e.nodes {
		entry, ok, err := e.csiNodeDriverOf(n)
		if !ok {
			t.Fatal(err)
		}
		if entry.NodeID != n {
			t.Errorf("CSINode %s: node ID %q", n, entry.NodeID)
		}
	}
}

// TestNodesPlacement puts a WaitForFirstConsumer claim on each node through its first pod: each
// claim's volume lands on the node its pod was scheduled to, in that node's pool alone, with
// what the pod wrote.
func TestNodesPlacement(t *testing.T) {
	e := needNodes(t)
	ns := e.namespace(t)
	var objs []any
	for _, n := range e.nodes {
		objs = append(objs, claimObject(ns, "c-"+n, imageClass, "32Mi"))
	}
	e.applyObjects(t, objs...)
	e.waitForFirstConsumer(t, ns, "c-"+e.nodes[0])
	objs = nil
	for _, n := range e.nodes {
		objs = append(objs, podObject(ns, podSpec{name: "p-" + n, node: n, volumes: []podVolume{{claim: "c-" + n, path: "/data"}}}))
	}
	e.applyObjects(t, objs...)
	handles := map[string]string{}
	images := map[string]string{}
	for _, n := range e.nodes {
		e.waitPodReady(t, ns, "p-"+n)
		v := e.waitClaimBound(t, ns, "c-"+n)
		images[n] = e.checkOnNode(t, ns, "p-"+n, v, n)
		handles[n] = v.Spec.CSI.VolumeHandle
		e.writeInPod(t, ns, "p-"+n, "/data/node.txt", []byte("written on "+n+"\n"))
	}
	for _, n := range e.nodes {
		e.deletePod(t, ns, "p-"+n)
	}
	for _, n := range e.nodes {
		e.waitUnstagedOn(t, ns, n, handles[n])
		got, err := mtoolsRead(images[n], "node.txt")
		if err != nil {
			t.Error(err)
		} else if string(got) != "written on "+n+"\n" {
			t.Errorf("node %s: its image holds %q", n, got)
		}
		if err := judge.Check(images[n]); err != nil {
			t.Errorf("node %s: %v", n, err)
		}
	}
}

// TestNodesCapacityRulesOut makes claims that only some nodes' pools can hold, for pods free to
// go anywhere: the scheduler puts each on a node that can hold it, and a claim no node can hold
// leaves its pod Pending with an event that says why.
func TestNodesCapacityRulesOut(t *testing.T) {
	e := needNodes(t)
	ns := e.namespace(t)
	e.waitCapacities(t, ns)
	// node-1 offers 960Mi, node-2 1984Mi, node-3 3008Mi.
	e.applyObjects(t,
		claimObject(ns, "only-3", imageClass, "2500Mi"),
		claimObject(ns, "not-1", imageClass, "1500Mi"),
		claimObject(ns, "none", imageClass, "4Gi"),
		podObject(ns, podSpec{name: "p-only-3", volumes: []podVolume{{claim: "only-3", path: "/data"}}}),
		// Kept off node-3, whose pool could hold it, so node-1 is the other choice.
		podObject(ns, podSpec{name: "p-not-1", notOn: []string{"node-3"}, volumes: []podVolume{{claim: "not-1", path: "/data"}}}),
		podObject(ns, podSpec{name: "p-none", volumes: []podVolume{{claim: "none", path: "/data"}}}),
	)
	e.waitPodReady(t, ns, "p-only-3")
	e.checkOnNode(t, ns, "p-only-3", e.waitClaimBound(t, ns, "only-3"), "node-3")
	e.waitPodReady(t, ns, "p-not-1")
	e.checkOnNode(t, ns, "p-not-1", e.waitClaimBound(t, ns, "not-1"), "node-2")

	e.waitFor(t, ns, "pod p-none unschedulable for want of storage", time.Minute, func() (bool, error) {
		for _, ev := range e.podEvents(t, ns, "p-none") {
			if ev.Reason == "FailedScheduling" && strings.Contains(ev.Message, "did not have enough free storage") {
				t.Logf("event: %s", ev.Message)
				return true, nil
			}
		}
		return false, fmt.Errorf("no FailedScheduling event naming storage")
	})
	var c pvc
	e.getJSONT(t, &c, "pvc", "-n", ns, "none")
	if c.Status.Phase != "Pending" || c.Metadata.Annotations["volume.kubernetes.io/selected-node"] != "" {
		t.Errorf("claim none is %s with node %q selected, want Pending and none", c.Status.Phase, c.Metadata.Annotations["volume.kubernetes.io/selected-node"])
	}
	if p := e.getPod(t, ns, "p-none"); p.Spec.NodeName != "" {
		t.Errorf("pod p-none was scheduled to %s", p.Spec.NodeName)
	}
}

// TestNodesOnlineExpansion grows a claim on node-2 from 64Mi to 1Gi while a pod there appends
// fsync'ed records, with the driver and its resizer on every node: the claim reaches 1Gi, df in
// the pod shows it, the writer sees no error and every record is in the grown image, which
// fsck.fat accepts; no resizer marks the resize failed and no warning reaches the claim.
func TestNodesOnlineExpansion(t *testing.T) {
	e := needNodes(t)
	e.needClaim(t, e.claims.onlineExpansion, "online expansion")
	ns := e.namespace(t)
	var pods list[pod]
	e.getJSONT(t, &pods, "pods", "-n", releaseNS, "-l", driverPods)
	for _, p := range pods.Items {
		if !containerReady(p, "csi-resizer") {
			t.Errorf("driver pod %s on %s: csi-resizer not ready", p.Metadata.Name, p.Spec.NodeName)
		}
	}
	if len(pods.Items) != len(e.nodes) {
		t.Errorf("%d driver pods, want one on each of %d nodes", len(pods.Items), len(e.nodes))
	}
	class := e.growableClass(t, ns, "grow", map[string]string{"pool": "image", "maxSize": "1Gi"})
	e.applyObjects(t, claimObject(ns, "data", class, "64Mi"))
	w := e.startWriterPod(t, ns, podSpec{name: "writer", node: "node-2", volumes: []podVolume{{claim: "data", path: "/data"}}, script: stoppableWriter})
	v := e.waitClaimBound(t, ns, "data")
	img := e.checkOnNode(t, ns, "writer", v, "node-2")
	w.waitReported(t, 100)

	e.kubectlT(t, "patch", "pvc", "-n", ns, "data", "--type=merge",
		"-p", `{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`)
	var seen sync.Map // resize statuses seen on the way
	e.waitFor(t, ns, "claim data at 1Gi", 3*time.Minute, func() (bool, error) {
		var c pvc
		if err := e.getJSON(&c, "pvc", "-n", ns, "data"); err != nil {
			return false, err
		}
		for _, st := range c.Status.AllocatedResourceStatuses {
			seen.Store(st, true)
		}
		got, err := parseQuantity(c.Status.Capacity["storage"])
		if err != nil {
			return false, err
		}
		if got == 1<<30 {
			return true, nil
		}
		if p := e.getPod(t, ns, "writer"); p.Status.Phase != "Running" {
			return false, fmt.Errorf("%w: the writer is %s during the growth", errGiveUp, p.Status.Phase)
		}
		return false, fmt.Errorf("claim data has capacity %s (%v)", c.Status.Capacity["storage"], c.Status.AllocatedResourceStatuses)
	})
	seen.Range(func(k, _ any) bool {
		if strings.Contains(k.(string), "Infeasible") {
			t.Errorf("the claim's resize was marked %s on the way", k)
		}
		return true
	})
	after := dfBytes(t, e, ns, "writer")
	if after < 1<<30-32<<20 || after > 1<<30 {
		t.Errorf("df in the pod shows %d bytes after the growth, want 1 GiB less the FATs' own sectors", after)
	}
	w.waitReported(t, w.last+100)
	n := w.stop(t)
	// Events come a moment after what they report: give stragglers time.
	time.Sleep(5 * time.Second)
	for _, ev := range e.claimEvents(t, ns, "data") {
		t.Logf("claim event: %s %s (%s %s%s, %d): %s", ev.Type, ev.Reason, ev.Source.Component, ev.ReportingComponent, ev.Source.Host, ev.Count, ev.Message)
		if ev.Type != "Normal" || strings.Contains(ev.Message, "NotFound") || strings.Contains(ev.Reason, "Failed") {
			t.Errorf("the claim got %s event %s: %s", ev.Type, ev.Reason, ev.Message)
		}
	}
	t.Logf("the writer wrote %d records without an error", n)

	e.deletePod(t, ns, "writer")
	e.waitUnstagedOn(t, ns, "node-2", v.Spec.CSI.VolumeHandle)
	if st, err := os.Stat(img); err != nil {
		t.Error(err)
	} else if st.Size() != 1<<30 {
		t.Errorf("image %s is %d bytes, want 1 GiB", img, st.Size())
	}
	if err := judge.Check(img); err != nil {
		t.Errorf("grown image %s: %v", img, err)
	}
	onNode, err := mtoolsRead(img, "log")
	if err != nil {
		t.Fatal(err)
	}
	checkLog(t, "node-2's image (mtype)", onNode, n)
}

// containerReady tells whether a pod's container of that name is ready.
func containerReady(p pod, name string) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == name {
			return c.Ready
		}
	}
	return false
}

// TestNodesSnapshotRestoreClone snapshots and clones a volume of node-3 while a pod there appends
// fsync'ed records. The scheduler does not know where a claim's source lives: a pod sent to
// another node leaves its claim Pending with an event that says where the source is, and pods
// given the node the source's volume names (its topology label, as docs/driver.md tells users)
// get the restore and the clone made on node-3, with the source's files and records.
func TestNodesSnapshotRestoreClone(t *testing.T) {
	e := needNodes(t)
	e.needClaim(t, e.claims.snapshots, "snapshots (CREATE_DELETE_SNAPSHOT)")
	e.needClaim(t, e.claims.clones, "clones (CLONE_VOLUME)")
	ns := e.namespace(t)
	t.Cleanup(func() {
		// A claim still being made from the snapshot holds it: the claims go first.
		if _, err := e.kubectlErr("delete", "pvc", "-n", ns, "restored", "copy", "--ignore-not-found", "--wait=false"); err != nil {
			t.Errorf("deleting the copies' claims: %v", err)
		}
		e.deleteSnapshots(t, ns)
	})

	e.applyObjects(t, claimObject(ns, "src", imageClass, "64Mi"))
	w := e.startWriterPod(t, ns, podSpec{name: "writer", node: "node-3", volumes: []podVolume{{claim: "src", path: "/data"}}, script: stoppableWriter})
	src := e.waitClaimBound(t, ns, "src")
	e.checkOnNode(t, ns, "writer", src, "node-3")
	e.writeSourceFiles(t, ns, "writer")
	acked := w.waitReported(t, 100)

	snap := object("snapshot.storage.k8s.io/v1", "VolumeSnapshot", ns, "snap")
	snap["spec"] = map[string]any{
		"volumeSnapshotClassName": snapshotClass,
		"source":                  map[string]any{"persistentVolumeClaimName": "src"},
	}
	e.applyObjects(t, snap)
	var vs volumeSnapshot
	e.waitFor(t, ns, "snapshot snap ready", 3*time.Minute, func() (bool, error) {
		vs = volumeSnapshot{}
		if err := e.getJSON(&vs, "volumesnapshot", "-n", ns, "snap"); err != nil {
			return false, err
		}
		if vs.Status != nil && vs.Status.ReadyToUse != nil && *vs.Status.ReadyToUse {
			return true, nil
		}
		if vs.Status != nil && vs.Status.Error != nil {
			return false, fmt.Errorf("snapshot snap: %s", vs.Status.Error.Message)
		}
		return false, fmt.Errorf("snapshot snap is not ready")
	})
	var content snapshotContent
	e.getJSONT(t, &content, "volumesnapshotcontent", *vs.Status.BoundVolumeSnapshotContentName)
	if got := content.Metadata.Labels[managedByLabel]; got != "node-3" {
		t.Errorf("content %s labelled %s=%q, want node-3", content.Metadata.Name, managedByLabel, got)
	}
	if h := content.Status; h == nil || h.SnapshotHandle == nil || !strings.HasPrefix(*h.SnapshotHandle, "snapshot:node-3:") {
		t.Errorf("content %s: snapshot handle %+v, want one of node-3", content.Metadata.Name, h)
	}

	// A restore for a pod on node-1: node-1's driver cannot make it, and says where it can be made.
	e.applyObjects(t,
		claimFrom(ns, "restored", imageClass, "64Mi", "VolumeSnapshot", "snap"),
		podObject(ns, podSpec{name: "astray", node: "node-1", volumes: []podVolume{{claim: "restored", path: "/data"}}}),
	)
	e.waitFor(t, ns, "claim restored refused on node-1, naming node-3", 2*time.Minute, func() (bool, error) {
		for _, ev := range e.claimEvents(t, ns, "restored") {
			if ev.Reason == "ProvisioningFailed" && strings.Contains(ev.Message, "lives on node node-3") &&
				strings.Contains(ev.Message, "not on node node-1") {
				t.Logf("event: %s", ev.Message)
				return true, nil
			}
		}
		return false, fmt.Errorf("no ProvisioningFailed event naming node-3")
	})
	var c pvc
	e.getJSONT(t, &c, "pvc", "-n", ns, "restored")
	if c.Status.Phase != "Pending" {
		t.Errorf("claim restored is %s after node-1 refused it, want Pending", c.Status.Phase)
	}
	e.deletePod(t, ns, "astray")

	// Pods given the node of the source's volume, by its topology label.
	srcNode := strings.TrimSuffix(strings.TrimPrefix(src.nodeAffinity(), topologyKey+" in ["), "]")
	if srcNode != "node-3" {
		t.Fatalf("source volume's node affinity %q", src.nodeAffinity())
	}
	onSource := func(name, claim string) map[string]any {
		p := podObject(ns, podSpec{name: name, volumes: []podVolume{{claim: claim, path: "/data"}}})
		p["spec"].(map[string]any)["nodeSelector"] = map[string]any{topologyKey: srcNode}
		return p
	}
	e.applyObjects(t,
		claimFrom(ns, "copy", imageClass, "64Mi", "PersistentVolumeClaim", "src"),
		onSource("restore-reader", "restored"),
		onSource("clone-reader", "copy"),
	)
	for _, r := range []struct{ claim, reader, what string }{
		{"restored", "restore-reader", "the restored snapshot"},
		{"copy", "clone-reader", "the clone"},
	} {
		e.waitPodReady(t, ns, r.reader)
		dst := e.waitClaimBound(t, ns, r.claim)
		e.checkOnNode(t, ns, r.reader, dst, "node-3")
		e.checkCopyIn(t, ns, r.reader, src, dst, acked, r.what)
	}
	n := w.stop(t)
	t.Logf("the writer wrote %d records without an error, across the snapshot and the clone", n)
	e.deletePod(t, ns, "restore-reader")
	e.deletePod(t, ns, "clone-reader")
	e.deletePod(t, ns, "writer")
	e.deleteSnapshots(t, ns)
}

// TestNodesUpgradeRolls rolls the driver's DaemonSet across the nodes with a helm upgrade while a
// pod on each node keeps a file open and appends an fsync'ed record every 100 ms: every node's
// driver pod is replaced, one node at a time, no writer sees an error, and every record each
// writer reported is in its node's image afterwards, which fsck.fat accepts.
func TestNodesUpgradeRolls(t *testing.T) {
	e := needNodes(t)
	ns := e.namespace(t)
	var objs []any
	for _, n := range e.nodes {
		objs = append(objs, claimObject(ns, "c-"+n, imageClass, "32Mi"))
	}
	e.applyObjects(t, objs...)
	writers := map[string]*writer{}
	vols := map[string]pv{}
	for _, n := range e.nodes {
		writers[n] = e.startWriterPod(t, ns, podSpec{name: "w-" + n, node: n, volumes: []podVolume{{claim: "c-" + n, path: "/data"}}, script: openWriter})
		vols[n] = e.waitClaimBound(t, ns, "c-"+n)
	}
	for _, n := range e.nodes {
		writers[n].waitReported(t, 20)
	}
	var before list[pod]
	e.getJSONT(t, &before, "pods", "-n", releaseNS, "-l", driverPods)
	start := time.Now()
	e.upgradeChart(t, fmt.Sprintf("podAnnotations.e2e\\.csi-fat\\.io/roll=at-%d", time.Now().UnixNano()))
	t.Logf("the DaemonSet rolled across %d nodes in %s", len(e.nodes), time.Since(start).Round(100*time.Millisecond))
	var after list[pod]
	e.getJSONT(t, &after, "pods", "-n", releaseNS, "-l", driverPods)
	if len(after.Items) != len(e.nodes) {
		t.Errorf("%d driver pods after the upgrade, want %d", len(after.Items), len(e.nodes))
	}
	for _, p := range after.Items {
		for _, old := range before.Items {
			if p.Metadata.UID == old.Metadata.UID {
				t.Errorf("driver pod %s on %s was not replaced", p.Metadata.Name, p.Spec.NodeName)
			}
		}
	}
	for _, n := range e.nodes {
		w := writers[n]
		w.waitReported(t, w.last+20)
	}
	e.stopWritersAndJudge(t, ns, writers, vols)
}

// stopWritersAndJudge stops the writer on each node, and once its volume is unstaged judges the
// image on that node: every record it reported there (mtype), the file system clean (fsck.fat).
func (e *environment) stopWritersAndJudge(t *testing.T, ns string, writers map[string]*writer, vols map[string]pv) {
	t.Helper()
	for _, n := range e.nodes {
		got := writers[n].stop(t)
		t.Logf("writer on %s: %d records without an error", n, got)
		e.deletePod(t, ns, "w-"+n)
	}
	for _, n := range e.nodes {
		e.waitUnstagedOn(t, ns, n, vols[n].Spec.CSI.VolumeHandle)
		img, err := e.imageFileOn(n, vols[n].Spec.CSI.VolumeHandle)
		if err != nil {
			t.Fatal(err)
		}
		log, err := mtoolsRead(img, "log")
		if err != nil {
			t.Fatal(err)
		}
		checkLog(t, n+"'s image (mtype)", log, writers[n].last)
		if err := judge.Check(img); err != nil {
			t.Errorf("node %s: %v", n, err)
		}
	}
}

// TestNodesDownAndBack takes node-2 down (its kubelet, kube-proxy and containerd stopped, as
// test/e2e/cluster/node.sh does) and brings it back while a pod on each node keeps a file open
// and appends an fsync'ed record every 100 ms: the control plane sees node-2 go NotReady, the
// writers of the other nodes go on reporting meanwhile, node-2's writer and its volume are
// served throughout, node-2 is Ready again and serves a new claim, and every writer finishes
// without an error with every record in its node's image.
func TestNodesDownAndBack(t *testing.T) {
	e := needNodes(t)
	ns := e.namespace(t)
	script := e.repo + "/test/e2e/cluster/node.sh"
	var objs []any
	for _, n := range e.nodes {
		objs = append(objs, claimObject(ns, "c-"+n, imageClass, "32Mi"))
	}
	e.applyObjects(t, objs...)
	writers := map[string]*writer{}
	vols := map[string]pv{}
	for _, n := range e.nodes {
		writers[n] = e.startWriterPod(t, ns, podSpec{name: "w-" + n, node: n, volumes: []podVolume{{claim: "c-" + n, path: "/data"}}, script: openWriter})
		vols[n] = e.waitClaimBound(t, ns, "c-"+n)
	}
	for _, n := range e.nodes {
		writers[n].waitReported(t, 20)
	}
	before := e.getPod(t, ns, "w-node-2")

	nodeReady := func(n string) string {
		var nd node
		e.getJSONT(t, &nd, "node", n)
		for _, c := range nd.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status
			}
		}
		return ""
	}
	t.Cleanup(func() {
		// Whatever happened, the node comes back for the tests after this one.
		if out, err := exec.Command(script, "start", "node-2").CombinedOutput(); err != nil {
			t.Errorf("node.sh start node-2: %v: %s", err, out)
		}
	})
	if out, err := exec.Command(script, "stop", "node-2").CombinedOutput(); err != nil {
		t.Fatalf("node.sh stop node-2: %v: %s", err, out)
	}
	down := time.Now()
	e.waitFor(t, ns, "node-2 not ready", 3*time.Minute, func() (bool, error) {
		st := nodeReady("node-2")
		return st != "True", fmt.Errorf("node-2 Ready is %s", st)
	})
	// The other nodes' writers go on meanwhile.
	for _, n := range []string{"node-1", "node-3"} {
		writers[n].waitReported(t, writers[n].last+50)
	}
	t.Logf("node-2 was down for %s", time.Since(down).Round(100*time.Millisecond))
	if out, err := exec.Command(script, "start", "node-2").CombinedOutput(); err != nil {
		t.Fatalf("node.sh start node-2: %v: %s", err, out)
	}
	e.waitFor(t, ns, "node-2 ready again", 3*time.Minute, func() (bool, error) {
		st := nodeReady("node-2")
		return st == "True", fmt.Errorf("node-2 Ready is %s", st)
	})
	e.waitFor(t, ns, "node-2's driver registered again", 2*time.Minute, func() (bool, error) {
		_, ok, err := e.csiNodeDriverOf("node-2")
		return ok, err
	})
	after := e.getPod(t, ns, "w-node-2")
	if after.Metadata.UID != before.Metadata.UID || after.restarts("c") != 0 || after.Status.Phase != "Running" {
		t.Errorf("node-2's writer: UID %s (was %s), %d restarts, %s", after.Metadata.UID, before.Metadata.UID, after.restarts("c"), after.Status.Phase)
	}
	// A kubelet just started knows its pods only once it has synced them: exec fails until then
	// ("pod does not exist"), though the API says the pod runs.
	e.waitFor(t, ns, "node-2's kubelet to know its writer again", time.Minute, func() (bool, error) {
		_, err := e.exec(ns, "w-node-2", nil, "/bin/sh", "-c", "true")
		return err == nil, err
	})
	// Its volume was served all along: the writer's log grows.
	count := func() int {
		return strings.Count(e.sh(t, ns, "w-node-2", "cat /data/log"), "\n")
	}
	c1 := count()
	time.Sleep(2 * time.Second)
	if c2 := count(); c2 <= c1 {
		t.Errorf("node-2's writer does not write on: %d records, then %d", c1, c2)
	}
	// node-2 serves a new claim.
	e.applyObjects(t, claimObject(ns, "new", imageClass, "32Mi"))
	e.startPod(t, ns, podSpec{name: "p-new", node: "node-2", volumes: []podVolume{{claim: "new", path: "/data"}}})
	e.checkOnNode(t, ns, "p-new", e.waitClaimBound(t, ns, "new"), "node-2")
	e.deletePod(t, ns, "p-new")

	e.stopWritersAndJudge(t, ns, writers, vols)
}
