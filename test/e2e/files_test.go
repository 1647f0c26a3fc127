package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// testData is size bytes of reproducible noise: the test knows its checksum before any pod
// has seen it.
func testData(seed byte, size int) []byte {
	b := make([]byte, size)
	var s [32]byte
	s[0] = seed
	rand.NewChaCha8(s).Read(b)
	return b
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// writeInPod writes data to path inside a pod, through kubectl exec's stdin, and makes it durable
// (fsync of the file).
func (e *environment) writeInPod(t *testing.T, ns, pod, path string, data []byte) {
	t.Helper()
	script := fmt.Sprintf("cat > '%s' && sync '%s'", path, path)
	if out, err := e.exec(ns, pod, bytes.NewReader(data), "/bin/sh", "-c", script); err != nil {
		t.Fatalf("writing %s in pod %s/%s: %v: %s", path, ns, pod, err, out)
	}
}

// sha256InPod is the checksum a pod's sha256sum computes of a file.
func (e *environment) sha256InPod(t *testing.T, ns, pod, path string) string {
	t.Helper()
	out := e.sh(t, ns, pod, fmt.Sprintf("sha256sum '%s'", path))
	sum, _, _ := strings.Cut(out, " ")
	return sum
}

// waitUnstaged waits until the kubelet has unstaged a volume: it no longer lists it in use, and
// no mount of the device (the driver's FUSE mount and its binds) is left on the host.
func (e *environment) waitUnstaged(t *testing.T, ns, handle, device string) {
	t.Helper()
	e.waitFor(t, ns, "volume "+handle+" unstaged", 2*time.Minute, func() (bool, error) {
		var n node
		if err := e.getJSON(&n, "node", e.node); err != nil {
			return false, err
		}
		for _, v := range n.Status.VolumesInUse {
			if strings.HasSuffix(v, "^"+handle) {
				return false, fmt.Errorf("node %s lists %s in use", e.node, v)
			}
		}
		points, err := mountsOf(device)
		if err != nil {
			return false, err
		}
		if len(points) > 0 {
			return false, fmt.Errorf("%s still mounted at %v", device, points)
		}
		return true, nil
	})
}

// waitForFirstConsumer waits until the PV controller says a claim waits for its first consumer,
// then checks that the claim is still pending with no node chosen.
func (e *environment) waitForFirstConsumer(t *testing.T, ns, claim string) {
	t.Helper()
	e.waitFor(t, ns, "claim "+claim+" waiting for its first consumer", time.Minute, func() (bool, error) {
		var events list[struct {
			Reason string `json:"reason"`
		}]
		if err := e.getJSON(&events, "events", "-n", ns, "--field-selector", "involvedObject.kind=PersistentVolumeClaim,involvedObject.name="+claim); err != nil {
			return false, err
		}
		for _, ev := range events.Items {
			if ev.Reason == "WaitForFirstConsumer" {
				return true, nil
			}
		}
		return false, fmt.Errorf("no WaitForFirstConsumer event for claim %s", claim)
	})
	var c pvc
	e.getJSONT(t, &c, "pvc", "-n", ns, claim)
	if c.Status.Phase != "Pending" || c.Spec.VolumeName != "" {
		t.Fatalf("claim %s is %s with volume %q before any pod uses it, want Pending and none", claim, c.Status.Phase, c.Spec.VolumeName)
	}
	if n, ok := c.Metadata.Annotations["volume.kubernetes.io/selected-node"]; ok {
		t.Fatalf("claim %s has a node selected (%s) before any pod uses it", claim, n)
	}
}

// requireMounted fails the test unless the host has mounts of device (the volume is staged
// and published): what makes waitUnstaged's look at the mount table mean something.
func requireMounted(t *testing.T, device string) {
	t.Helper()
	points, err := mountsOf(device)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) < 2 {
		t.Fatalf("%s is mounted at %q on the host, want its staging path and a target", device, points)
	}
	t.Logf("%s is mounted at %q", device, points)
}
