package mounters

import (
	"testing"

	"github.com/csi-fat/csi-fat/node/volume"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestMounterPodSpec: a mounter pod runs on its node with nothing from the host and no
// privilege, and its memory limit follows the volume's cache size.
func TestMounterPodSpec(t *testing.T) {
	l := NewLauncher(Config{Mode: Pod, Pod: &PodConfig{
		Namespace: "csi-fat", Image: "ghcr.io/csi-fat/csi-fat:v1", KubeletDir: "/var/lib/kubelet",
		MemoryRequest: resource.MustParse("32Mi"), MemoryOverhead: resource.MustParse("160Mi"),
	}}, "", "worker-1", "")
	for _, c := range []struct {
		cache int64
		limit string
	}{{0, "224Mi"}, {256 << 20, "416Mi"}} {
		rec := volume.Record{ID: "image:worker-1:pvc-1", Name: "pvc-1", Params: volume.Params{CacheBytes: c.cache}}
		pod := l.podSpec(rec)
		if pod.Spec.NodeName != "worker-1" || pod.Namespace != "csi-fat" || pod.Annotations[mounterVolumeAnnot] != rec.ID {
			t.Errorf("pod on %q in %q for %q", pod.Spec.NodeName, pod.Namespace, pod.Annotations[mounterVolumeAnnot])
		}
		ctr := pod.Spec.Containers[0]
		if got := ctr.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse(c.limit)) != 0 {
			t.Errorf("cache %d: memory limit %s, want %s", c.cache, got.String(), c.limit)
		}
		sc, psc := ctr.SecurityContext, pod.Spec.SecurityContext
		if *sc.Privileged || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || len(sc.Capabilities.Drop) != 1 ||
			sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 || !*psc.RunAsNonRoot || *psc.RunAsUser == 0 ||
			psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("security context %+v / %+v", sc, psc)
		}
		if pod.Spec.HostNetwork || pod.Spec.HostPID || pod.Spec.HostIPC || *pod.Spec.AutomountServiceAccountToken {
			t.Error("the pod shares a host namespace or gets a token")
		}
		for _, v := range pod.Spec.Volumes {
			if v.EmptyDir == nil {
				t.Errorf("volume %s is not an emptyDir", v.Name)
			}
		}
	}
}

// TestMounterPodLimitTmpfsPool: an image in a pool on tmpfs is memory the mounter's writes are
// charged for, so its pod's limit holds the volume too.
func TestMounterPodLimitTmpfsPool(t *testing.T) {
	pool := t.TempDir()
	if err := unix.Mount("csi-fat-test", pool, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount tmpfs (needs root): %v", err)
	}
	defer unix.Unmount(pool, unix.MNT_DETACH)
	l := NewLauncher(Config{Mode: Pod, Pod: &PodConfig{
		Namespace: "ns", Image: "img", KubeletDir: "/var/lib/kubelet", MemoryOverhead: resource.MustParse("160Mi"),
	}}, "", "n", pool)
	rec := volume.Record{ID: "image:n:v", Name: "v", Size: 1 << 30, MaxSize: 2 << 30, Params: volume.Params{Pool: volume.PoolImage}}
	got := l.podSpec(rec).Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
	if want := resource.MustParse("2272Mi"); got.Cmp(want) != 0 {
		t.Errorf("limit %s, want %s (160Mi + 64Mi cache + 2Gi the volume may grow to)", got.String(), want.String())
	}
}
