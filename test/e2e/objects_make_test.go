package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// idleScript keeps a pod running until it is deleted, and ends at once on SIGTERM (a shell as
// PID 1 would otherwise ignore it and make every deletion wait out the grace period).
const idleScript = `trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done`

// namespace makes a namespace of the test's own; at the end it is deleted with everything in it,
// and the test waits until the volumes of its claims are gone, so the next test starts clean.
func (e *environment) namespace(t *testing.T) string {
	t.Helper()
	slug := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, strings.TrimPrefix(t.Name(), "Test"))
	name := fmt.Sprintf("e2e-%.40s-%04x", slug, rand.IntN(1<<16))
	e.applyObjects(t, object("v1", "Namespace", "", name))
	t.Cleanup(func() {
		if t.Failed() {
			e.dump(t, name)
		}
		if _, err := e.kubectlErr("delete", "namespace", name, "--timeout=3m"); err != nil {
			t.Errorf("deleting the test's namespace: %v", err)
		}
		if err := e.waitVolumesGone(func(p *pv) bool { return p.Spec.ClaimRef != nil && p.Spec.ClaimRef.Namespace == name }); err != nil {
			e.dump(t, "")
			t.Errorf("volumes of namespace %s: %v", name, err)
		}
	})
	return name
}

// object is the skeleton of a labelled object.
func object(apiVersion, kind, ns, name string) map[string]any {
	meta := map[string]any{"name": name, "labels": map[string]any{testLabel: "true"}}
	if ns != "" {
		meta["namespace"] = ns
	}
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
}

// storageClass makes a StorageClass of the driver for the test, removed at its end, and returns
// its name (the namespace's, so tests do not collide).
func (e *environment) storageClass(t *testing.T, ns, suffix string, params map[string]string) string {
	t.Helper()
	return e.makeStorageClass(t, ns, suffix, params, false)
}

// growableClass is storageClass with allowVolumeExpansion: claims of it may ask for more.
func (e *environment) growableClass(t *testing.T, ns, suffix string, params map[string]string) string {
	t.Helper()
	return e.makeStorageClass(t, ns, suffix, params, true)
}

func (e *environment) makeStorageClass(t *testing.T, ns, suffix string, params map[string]string, growable bool) string {
	t.Helper()
	name := ns + "-" + suffix
	sc := object("storage.k8s.io/v1", "StorageClass", "", name)
	sc["provisioner"] = driverName
	sc["volumeBindingMode"] = "WaitForFirstConsumer"
	sc["reclaimPolicy"] = "Delete"
	sc["allowVolumeExpansion"] = growable
	sc["parameters"] = params
	e.applyObjects(t, sc)
	t.Cleanup(func() {
		if _, err := e.kubectlErr("delete", "storageclass", name, "--ignore-not-found"); err != nil {
			t.Errorf("deleting StorageClass %s: %v", name, err)
		}
	})
	return name
}

// claimObject is a ReadWriteOnce PVC of size (a quantity such as "32Mi").
func claimObject(ns, name, class, size string) map[string]any {
	c := object("v1", "PersistentVolumeClaim", ns, name)
	c["spec"] = map[string]any{
		"accessModes":      []string{"ReadWriteOnce"},
		"storageClassName": class,
		"resources":        map[string]any{"requests": map[string]any{"storage": size}},
	}
	return c
}

// claimFrom is claimObject made from a data source: a VolumeSnapshot (restore) or a
// PersistentVolumeClaim (clone) of the same namespace.
func claimFrom(ns, name, class, size, sourceKind, sourceName string) map[string]any {
	c := claimObject(ns, name, class, size)
	source := map[string]any{"kind": sourceKind, "name": sourceName}
	if sourceKind == "VolumeSnapshot" {
		source["apiGroup"] = "snapshot.storage.k8s.io"
	}
	c["spec"].(map[string]any)["dataSource"] = source
	return c
}

// podVolume is a claim a pod mounts, or an inline volume of the driver.
type podVolume struct {
	claim string
	// inline, when not nil, makes the volume a CSI ephemeral inline volume of the driver with
	// these volumeAttributes instead of a claim.
	inline   map[string]string
	path     string
	readOnly bool // the claim is mounted read-only (persistentVolumeClaim.readOnly)
	// propagation is the mount's mountPropagation ("" for the default, None).
	propagation string
}

// podSpec describes a test pod: the busybox image running script (idleScript when empty).
type podSpec struct {
	name            string
	volumes         []podVolume
	script          string
	securityContext map[string]any
	// node, when set, pins the pod to that node (nodeSelector kubernetes.io/hostname).
	node string
	// notOn keeps the pod off these nodes (a required node affinity).
	notOn []string
}

func podObject(ns string, s podSpec) map[string]any {
	script := s.script
	if script == "" {
		script = idleScript
	}
	var mounts, volumes []map[string]any
	for i, v := range s.volumes {
		vname := fmt.Sprintf("v%d", i)
		m := map[string]any{"name": vname, "mountPath": v.path}
		if v.propagation != "" {
			m["mountPropagation"] = v.propagation
		}
		mounts = append(mounts, m)
		if v.inline != nil {
			volumes = append(volumes, map[string]any{
				"name": vname,
				"csi":  map[string]any{"driver": driverName, "readOnly": v.readOnly, "volumeAttributes": v.inline},
			})
			continue
		}
		volumes = append(volumes, map[string]any{
			"name":                  vname,
			"persistentVolumeClaim": map[string]any{"claimName": v.claim, "readOnly": v.readOnly},
		})
	}
	container := map[string]any{
		"name":            "c",
		"image":           testImage,
		"imagePullPolicy": "Never",
		"command":         []string{"/bin/sh", "-c", script},
		"volumeMounts":    mounts,
	}
	spec := map[string]any{
		"restartPolicy":                 "Never",
		"terminationGracePeriodSeconds": 5,
		"containers":                    []any{container},
		"volumes":                       volumes,
	}
	if s.securityContext != nil {
		spec["securityContext"] = s.securityContext
	}
	if s.node != "" {
		spec["nodeSelector"] = map[string]any{"kubernetes.io/hostname": s.node}
	}
	if len(s.notOn) > 0 {
		spec["affinity"] = map[string]any{"nodeAffinity": map[string]any{
			"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
				"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{
					"key": "kubernetes.io/hostname", "operator": "NotIn", "values": s.notOn,
				}}}},
			},
		}}
	}
	p := object("v1", "Pod", ns, s.name)
	p["spec"] = spec
	return p
}

// startPod creates a pod and waits until it is ready.
func (e *environment) startPod(t *testing.T, ns string, s podSpec) pod {
	t.Helper()
	e.applyObjects(t, podObject(ns, s))
	return e.waitPodReady(t, ns, s.name)
}

// podStartTimeout covers scheduling, provisioning (mkfs of the volume), staging and the start
// of the container.
const podStartTimeout = 3 * time.Minute

// hopelessReasons are container states that waiting does not mend.
var hopelessReasons = map[string]bool{
	"ErrImageNeverPull": true, "InvalidImageName": true, "CreateContainerConfigError": true,
	"CreateContainerError": true, "CrashLoopBackOff": true, "RunContainerError": true,
}

func (e *environment) waitPodReady(t *testing.T, ns, name string) pod {
	t.Helper()
	var p pod
	e.waitFor(t, ns, "pod "+name+" ready", podStartTimeout, func() (bool, error) {
		p = pod{}
		if err := e.getJSON(&p, "pod", "-n", ns, name); err != nil {
			return false, err
		}
		if p.ready() {
			return true, nil
		}
		if p.Status.Phase == "Failed" || p.Status.Phase == "Succeeded" {
			return false, fmt.Errorf("%w: pod %s ended (%s)", errGiveUp, name, p.Status.Phase)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && hopelessReasons[w.Reason] {
				return false, fmt.Errorf("%w: container %s: %s: %s", errGiveUp, cs.Name, w.Reason, w.Message)
			}
		}
		return false, fmt.Errorf("pod %s is %s", name, p.Status.Phase)
	})
	return p
}

// deletePod deletes a pod and waits until it is gone (the kubelet has unmounted its volumes).
func (e *environment) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := e.kubectlErr("delete", "pod", "-n", ns, name, "--timeout=2m"); err != nil {
		e.dump(t, ns)
		t.Fatal(err)
	}
}

// waitClaimBound waits until a claim is bound and returns its volume.
func (e *environment) waitClaimBound(t *testing.T, ns, name string) pv {
	t.Helper()
	var c pvc
	e.waitFor(t, ns, "claim "+name+" bound", podStartTimeout, func() (bool, error) {
		c = pvc{}
		if err := e.getJSON(&c, "pvc", "-n", ns, name); err != nil {
			return false, err
		}
		return c.Status.Phase == "Bound", fmt.Errorf("claim %s is %s", name, c.Status.Phase)
	})
	var v pv
	e.getJSONT(t, &v, "pv", c.Spec.VolumeName)
	if v.Spec.CSI == nil || v.Spec.CSI.Driver != driverName {
		t.Fatalf("volume %s of claim %s is not a %s volume", v.Metadata.Name, name, driverName)
	}
	return v
}
