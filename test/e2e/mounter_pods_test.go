package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestMountsOutliveDriver: a pod keeps a file open on a volume and appends an fsync'ed record
// every 100 ms while the driver's pod is deleted, the DaemonSet rolls through a helm upgrade,
// and the driver's process is killed with SIGKILL on the host. The writer sees no error; every
// record and a file written before are there afterwards; a new claim is provisioned and used.
// Then one volume's mounter process is killed with SIGKILL on the host, and then its mounter pod
// deleted: each time a new mounter pod takes the live connection over, its writer carries on
// without an error, its condition stays normal, and every record is there afterwards.
func TestMountsOutliveDriver(t *testing.T) {
	e := need(t)
	ns := e.namespace(t)
	before := testData(8, 1<<20+7)
	e.applyObjects(t, claimObject(ns, "a", imageClass, "16Mi"))
	w := e.startWriterWith(t, ns, "writer-a", "a", openWriter)
	pvA := e.waitClaimBound(t, ns, "a")
	e.writeInPod(t, ns, "writer-a", "/data/before.bin", before)
	mounterA := e.mounterPodOf(t, pvA.Spec.CSI.VolumeHandle)
	e.checkMounterPod(t, mounterA)
	n := w.waitReported(t, 10)
	// A mounter pod no staged volume's record names, as a crash between making a pod and
	// recording it leaves: the next driver removes it.
	orphan := e.startOrphanMounter(t, mounterA)

	e.restartDriver(t, "its pod deleted", func() {
		e.kubectlT(t, "delete", "pod", "-n", releaseNS, e.driverPod(t).Metadata.Name, "--timeout=2m")
	})
	n = w.waitReported(t, n+20)
	e.waitFor(t, releaseNS, "the orphaned mounter pod removed", time.Minute, func() (bool, error) {
		var pods list[pod]
		if err := e.getJSON(&pods, "pods", "-n", releaseNS, "--field-selector=metadata.name="+orphan); err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%s is still there", orphan)
	})

	e.restartDriver(t, "a helm upgrade that changes its arguments", func() {
		e.upgradeChart(t, "logLevel=5")
	})
	t.Cleanup(func() { e.upgradeChart(t, "logLevel=4") })
	n = w.waitReported(t, n+20)

	e.restartDriver(t, "its process killed with SIGKILL", func() {
		pids := hostPIDs(t, func(cmdline []string, _ string) bool {
			return len(cmdline) > 1 && filepath.Base(cmdline[0]) == "csi-fat" && cmdline[1] == "driver"
		})
		if len(pids) != 1 {
			t.Fatalf("%d driver processes on the host: %v", len(pids), pids)
		}
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	n = w.waitReported(t, n+20)
	if again := e.mounterPodOf(t, pvA.Spec.CSI.VolumeHandle); again.Metadata.UID != mounterA.Metadata.UID {
		t.Errorf("volume %s is served by mounter pod %s after the restarts, not %s", pvA.Spec.CSI.VolumeHandle, again.Metadata.Name, mounterA.Metadata.Name)
	}
	if got, want := e.sha256InPod(t, ns, "writer-a", "/data/before.bin"), sha256Hex(before); got != want {
		t.Errorf("after the restarts the writer's pod reads a file written before them with sha256 %s, want %s", got, want)
	}

	// A new claim after all that.
	e.applyObjects(t, claimObject(ns, "b", imageClass, "16Mi"))
	wb := e.startWriterWith(t, ns, "writer-b", "b", openWriter)
	pvB := e.waitClaimBound(t, ns, "b")
	e.startPod(t, ns, podSpec{name: "holder-b", volumes: []podVolume{{claim: "b", path: "/data"}}})
	nb := wb.waitReported(t, 10)

	// b's writer stops with every record fsync'ed; then b's mounter dies, killed on the host and
	// then deleted. Each time a new mounter pod takes its connection over (the driver holds it):
	// holder-b, whose mount it is, reads the log whole and writes a file, its requests waiting
	// meanwhile instead of failing. A writer with a write acknowledged and not yet written back at
	// the kill would get EIO once (docs/driver.md): here nothing is left unwritten, so nothing
	// may fail.
	nb = wb.stop(t)
	podB := e.getPod(t, ns, "holder-b")
	target := filepath.Join("/var/lib/kubelet/pods", podB.Metadata.UID, "volumes/kubernetes.io~csi", pvB.Metadata.Name, "mount")
	for i, how := range []string{"its process killed with SIGKILL", "its pod deleted"} {
		old := e.mounterPodOf(t, pvB.Spec.CSI.VolumeHandle)
		ended := time.Now()
		if how == "its pod deleted" {
			e.kubectlT(t, "delete", "pod", "-n", releaseNS, old.Metadata.Name, "--wait=false")
		} else if err := syscall.Kill(e.mounterPID(t, old), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		checkLog(t, "the log read through b's mount after its mounter pod "+how, []byte(e.sh(t, ns, "holder-b", "cat /data/log")), nb)
		e.sh(t, ns, "holder-b", fmt.Sprintf("echo 'after %d' >> /data/after && sync /data/after", i+1))
		t.Logf("b's mounter pod %s, %s: holder-b read the log and wrote a file %v later", old.Metadata.Name, how, time.Since(ended))
		e.waitFor(t, releaseNS, "a new mounter pod serving b", 2*time.Minute, func() (bool, error) {
			var pods list[mounterPod]
			if err := e.getJSON(&pods, "pods", "-n", releaseNS, "-l", mounterPods+",fat.csi-fat.io/volume-hash="+volumeHash(pvB.Spec.CSI.VolumeHandle)); err != nil {
				return false, err
			}
			var names []string
			for _, p := range pods.Items {
				names = append(names, p.Metadata.Name)
			}
			return len(pods.Items) == 1 && pods.Items[0].Metadata.UID != old.Metadata.UID, fmt.Errorf("mounter pods of b: %v", names)
		})
		if abnormal, message := e.volumeCondition(t, pvB.Spec.CSI.VolumeHandle, target); abnormal {
			t.Errorf("volume condition after b's mounter pod %s, %s: abnormal, %q", old.Metadata.Name, how, message)
		}
		n = w.waitReported(t, n+20) // a's writer carries on
	}
	e.startPod(t, ns, podSpec{name: "reader-b", volumes: []podVolume{{claim: "b", path: "/data"}}})
	checkLog(t, "the log of the writer whose mounter was killed and deleted", []byte(e.sh(t, ns, "reader-b", "cat /data/log")), nb)
	if got := e.sh(t, ns, "reader-b", "cat /data/after"); got != "after 1\nafter 2\n" {
		t.Errorf("a new pod reads %q from what holder-b wrote after each takeover", got)
	}

	n = w.stop(t)
	e.startPod(t, ns, podSpec{name: "reader-a", volumes: []podVolume{{claim: "a", path: "/data"}}})
	checkLog(t, "the log of the writer that saw the driver restart three times", []byte(e.sh(t, ns, "reader-a", "cat /data/log")), n)
	if got, want := e.sha256InPod(t, ns, "reader-a", "/data/before.bin"), sha256Hex(before); got != want {
		t.Errorf("a new pod reads the file written before the restarts with sha256 %s, want %s", got, want)
	}
}

// TestMounterPodCost measures what serving a volume in a pod of its own costs: the time from
// claim to a running pod with mounter pods and with volumes served in the driver's container
// (the chart's mounter.mode switched by helm upgrade in the same run), and a mounter's memory
// idle and during a 1 GiB copy. It checks the mounter pod exists only in pod mode.
func TestMounterPodCost(t *testing.T) {
	e := need(t)
	e.waitNoMounters(t)
	measure := func(mode string, runs int) []time.Duration {
		var ds []time.Duration
		ns := e.namespace(t)
		for i := range runs {
			start := time.Now()
			e.applyObjects(t, claimObject(ns, "c", imageClass, "16Mi"))
			e.startPod(t, ns, podSpec{name: "p", volumes: []podVolume{{claim: "c", path: "/data"}}})
			ds = append(ds, time.Since(start))
			vol := e.waitClaimBound(t, ns, "c")
			var pods list[pod]
			e.getJSONT(t, &pods, "pods", "-n", releaseNS, "-l", mounterPods+",fat.csi-fat.io/volume-hash="+volumeHash(vol.Spec.CSI.VolumeHandle))
			if want := map[string]int{"pod": 1, "inprocess": 0}[mode]; len(pods.Items) != want {
				t.Errorf("mounter.mode=%s, run %d: %d mounter pods for the volume, want %d", mode, i, len(pods.Items), want)
			}
			e.deletePod(t, ns, "p")
			e.kubectlT(t, "delete", "pvc", "-n", ns, "c", "--timeout=2m")
			if err := e.waitVolumesGone(func(p *pv) bool { return p.Spec.ClaimRef != nil && p.Spec.ClaimRef.Namespace == ns }); err != nil {
				t.Fatal(err)
			}
			e.waitNoMounters(t)
		}
		return ds
	}
	podTimes := measure("pod", 3)
	e.upgradeChart(t, "mounter.mode=inprocess")
	restored := false
	t.Cleanup(func() {
		if !restored {
			e.upgradeChart(t, "mounter.mode=pod")
		}
	})
	inTimes := measure("inprocess", 3)
	e.upgradeChart(t, "mounter.mode=pod")
	restored = true
	t.Logf("claim to running pod: with mounter pods %v, served in the driver's container %v", podTimes, inTimes)

	// Memory of a mounter: idle, then its peak during a 1 GiB copy.
	ns := e.namespace(t)
	e.applyObjects(t, claimObject(ns, "big", imageClass, "1200Mi"))
	e.startPod(t, ns, podSpec{name: "copier", volumes: []podVolume{{claim: "big", path: "/data"}}})
	big := e.waitClaimBound(t, ns, "big")
	mp := e.mounterPodOf(t, big.Spec.CSI.VolumeHandle)
	pid := e.mounterPID(t, mp)
	idle := procStatus(t, pid, "VmRSS")
	e.sh(t, ns, "copier", "dd if=/dev/zero of=/data/big.bin bs=1M count=1024 conv=fsync && sync /data/big.bin")
	peak := procStatus(t, pid, "VmHWM")
	cgroupPeak := memoryCgroupPeak(t, pid)
	if got := e.sh(t, ns, "copier", "stat -c %s /data/big.bin"); strings.TrimSpace(got) != strconv.Itoa(1<<30) {
		t.Errorf("the copy is %s bytes", got)
	}
	t.Logf("mounter pod %s memory: idle %d KiB resident, peak %d KiB resident during a 1 GiB copy, its memory cgroup's peak (page cache included) %d KiB (cache 64 MiB, limit %s)",
		mp.Metadata.Name, idle, peak, cgroupPeak>>10, mp.memoryLimit())
}

// mounterPod is the part of a mounter pod the tests read.
type mounterPod struct {
	pod
	Spec struct {
		NodeName        string         `json:"nodeName"`
		SecurityContext map[string]any `json:"securityContext"`
		Containers      []struct {
			Name            string         `json:"name"`
			SecurityContext map[string]any `json:"securityContext"`
			Resources       struct {
				Limits map[string]string `json:"limits"`
			} `json:"resources"`
		} `json:"containers"`
		PriorityClassName string `json:"priorityClassName"`
	} `json:"spec"`
	raw json.RawMessage
}

func (m *mounterPod) memoryLimit() string {
	if len(m.Spec.Containers) == 0 {
		return ""
	}
	return m.Spec.Containers[0].Resources.Limits["memory"]
}

func volumeHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:8])
}

// mounterPodOf is the one running mounter pod serving the volume.
func (e *environment) mounterPodOf(t *testing.T, volumeID string) *mounterPod {
	t.Helper()
	var out list[json.RawMessage]
	e.getJSONT(t, &out, "pods", "-n", releaseNS, "-l", mounterPods+",fat.csi-fat.io/volume-hash="+volumeHash(volumeID),
		"--field-selector=status.phase=Running")
	if len(out.Items) != 1 {
		e.dump(t, releaseNS)
		t.Fatalf("%d running mounter pods serve volume %s, want 1", len(out.Items), volumeID)
	}
	m := &mounterPod{raw: out.Items[0]}
	if err := json.Unmarshal(out.Items[0], m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkMounterPod checks a mounter pod is what the driver promises: on its node, for the
// volume, critical, and admissible where Pod Security enforces the restricted level (asked of
// the API server itself, by a dry run of the same pod in such a namespace).
func (e *environment) checkMounterPod(t *testing.T, m *mounterPod) {
	t.Helper()
	node, err := e.onlyNode()
	if err != nil {
		t.Fatal(err)
	}
	if m.Spec.NodeName != node {
		t.Errorf("mounter pod %s on node %q, want %q", m.Metadata.Name, m.Spec.NodeName, node)
	}
	if m.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("mounter pod %s has priority class %q", m.Metadata.Name, m.Spec.PriorityClassName)
	}
	if m.memoryLimit() == "" {
		t.Errorf("mounter pod %s has no memory limit", m.Metadata.Name)
	}
	restricted := e.namespace(t)
	e.kubectlT(t, "label", "namespace", restricted, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
	var obj map[string]any
	if err := json.Unmarshal(m.raw, &obj); err != nil {
		t.Fatal(err)
	}
	spec := obj["spec"].(map[string]any)
	delete(spec, "nodeName") // let admission judge the pod, not the node's capacity
	// The priority the API server filled in from the class is not the point here.
	delete(spec, "priorityClassName")
	delete(spec, "priority")
	delete(spec, "preemptionPolicy")
	copyObj := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "mounter-copy", "namespace": restricted},
		"spec":     spec,
	}
	js, _ := json.Marshal(copyObj)
	out, err := e.run(context.Background(), bytes.NewReader(js), e.kubectl, "create", "--dry-run=server", "-f", "-")
	if err != nil || bytes.Contains(out, []byte("Warning")) {
		t.Errorf("a copy of mounter pod %s is not admitted under the restricted Pod Security level: %v\n%s", m.Metadata.Name, err, out)
	}
}

// startOrphanMounter starts a copy of a mounter pod, for a volume that does not exist, and
// waits until it runs; it returns its name.
func (e *environment) startOrphanMounter(t *testing.T, m *mounterPod) string {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(m.raw, &obj); err != nil {
		t.Fatal(err)
	}
	meta := obj["metadata"].(map[string]any)
	name := "csi-fat-mounter-orphan"
	labels := meta["labels"].(map[string]any)
	labels["fat.csi-fat.io/volume-hash"] = volumeHash("image:gone:orphan")
	copyObj := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": releaseNS, "labels": labels,
			"annotations": map[string]any{"fat.csi-fat.io/volume": "image:gone:orphan"}},
		"spec": obj["spec"],
	}
	js, _ := json.Marshal(copyObj)
	if out, err := e.run(context.Background(), bytes.NewReader(js), e.kubectl, "create", "-f", "-"); err != nil {
		t.Fatalf("creating an orphaned mounter pod: %v\n%s", err, out)
	}
	t.Cleanup(func() { e.kubectlErr("delete", "pod", "-n", releaseNS, name, "--ignore-not-found", "--timeout=1m") })
	e.waitPodReady(t, releaseNS, name)
	return name
}

// getPod reads a pod.
func (e *environment) getPod(t *testing.T, ns, name string) pod {
	t.Helper()
	var p pod
	e.getJSONT(t, &p, "pod", "-n", ns, name)
	return p
}

// waitNoMounters waits until no mounter pod is left from earlier tests.
func (e *environment) waitNoMounters(t *testing.T) {
	t.Helper()
	e.waitFor(t, releaseNS, "no mounter pods left", 3*time.Minute, func() (bool, error) {
		var pods list[pod]
		if err := e.getJSON(&pods, "pods", "-n", releaseNS, "-l", mounterPods); err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%d mounter pods", len(pods.Items))
	})
}

// mounterPID is the host PID of a mounter pod's process.
func (e *environment) mounterPID(t *testing.T, m *mounterPod) int {
	t.Helper()
	pids := hostPIDs(t, func(cmdline []string, cgroup string) bool {
		return len(cmdline) > 1 && cmdline[1] == "mounter" && inPodCgroup(cgroup, m.Metadata.UID)
	})
	if len(pids) != 1 {
		t.Fatalf("%d processes of mounter pod %s on the host: %v", len(pids), m.Metadata.Name, pids)
	}
	return pids[0]
}

// hostPIDs lists the host's processes that match by command line and cgroup file.
func hostPIDs(t *testing.T, match func(cmdline []string, cgroup string) bool) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		cgroup, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if match(strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00"), string(cgroup)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// inPodCgroup tells whether a /proc/PID/cgroup file puts the process in the pod with uid (the
// cgroupfs driver writes pod<uid>, the systemd driver pod<uid with underscores>).
func inPodCgroup(cgroup, uid string) bool {
	return strings.Contains(cgroup, "pod"+uid) || strings.Contains(cgroup, "pod"+strings.ReplaceAll(uid, "-", "_"))
}

// procStatus reads a KiB figure of /proc/PID/status.
func procStatus(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %q", pid, field, v)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// memoryCgroupPeak is the peak memory use, in bytes, of the memory cgroup of pid's container
// (cgroup v1 memory.max_usage_in_bytes, or v2 memory.peak), page cache included.
func memoryCgroupPeak(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[1] == "memory" || strings.Contains(parts[1], ",memory"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.max_usage_in_bytes")
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.peak")
		default:
			continue
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil {
			return n
		}
	}
	t.Fatalf("no memory cgroup peak for pid %d in:\n%s", pid, b)
	return 0
}

// volumeCondition asks the driver, over its socket on the host as the kubelet does, for the
// condition of a volume published at target.
func (e *environment) volumeCondition(t *testing.T, volumeID, target string) (abnormal bool, message string) {
	t.Helper()
	sock := filepath.Join("/var/lib/kubelet/plugins", driverName, "csi.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := csi.NewNodeClient(conn).NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: volumeID, VolumePath: target})
	if err != nil {
		t.Fatalf("NodeGetVolumeStats %s at %s: %v", volumeID, target, err)
	}
	c := resp.GetVolumeCondition()
	return c.GetAbnormal(), c.GetMessage()
}
