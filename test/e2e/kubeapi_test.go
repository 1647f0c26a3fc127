package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/csi-fat/csi-fat/internal/kubeapi"
)

// TestDriverAPIClient checks the driver's own API client (mounter pods, discovered
// PersistentVolumes) against the cluster's API server: every call the driver makes, and the
// errors it tells apart (not found, already exists, a failed precondition), since the driver's
// decisions hang on them.
func TestDriverAPIClient(t *testing.T) {
	e := need(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubeapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := e.namespace(t)

	t.Run("pods", func(t *testing.T) {
		pods := client.Pods(ns)
		spec := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "api-client", Labels: map[string]string{"e2e.csi-fat.io/api": "pod"}},
			Spec: corev1.PodSpec{
				Containers:                    []corev1.Container{{Name: "c", Image: testImage, Command: []string{"sleep", "3600"}}},
				TerminationGracePeriodSeconds: new(int64),
			},
		}
		made, err := pods.Create(ctx, spec, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if made.UID == "" || made.Namespace != ns {
			t.Fatalf("created pod has UID %q, namespace %q", made.UID, made.Namespace)
		}
		if _, err := pods.Create(ctx, spec, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Errorf("second create: %v, want AlreadyExists", err)
		}
		got, err := pods.Get(ctx, "api-client", metav1.GetOptions{})
		if err != nil || got.UID != made.UID || got.Spec.Containers[0].Image != testImage {
			t.Fatalf("get: %v (UID %s, want %s)", err, got.UID, made.UID)
		}
		if _, err := pods.Get(ctx, "no-such-pod", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get of a missing pod: %v, want NotFound", err)
		}
		for _, c := range []struct {
			opts metav1.ListOptions
			want int
		}{
			{metav1.ListOptions{LabelSelector: "e2e.csi-fat.io/api=pod"}, 1},
			{metav1.ListOptions{LabelSelector: "e2e.csi-fat.io/api=other"}, 0},
			{metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "api-client").String()}, 1},
		} {
			list, err := pods.List(ctx, c.opts)
			if err != nil || len(list.Items) != c.want {
				t.Errorf("list %+v: %v, %d pods, want %d", c.opts, err, len(list.Items), c.want)
			}
		}
		wrong := types.UID("00000000-0000-0000-0000-000000000000")
		err = pods.Delete(ctx, "api-client", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrong}})
		if !apierrors.IsConflict(err) {
			t.Errorf("delete with another pod's UID: %v, want Conflict", err)
		}
		zero := int64(0)
		err = pods.Delete(ctx, "api-client", metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &made.UID}})
		if err != nil {
			t.Fatalf("delete: %v", err)
		}
		for {
			_, err := pods.Get(ctx, "api-client", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("pod still there after its deletion: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("persistentvolumes", func(t *testing.T) {
		pvs := client.PersistentVolumes()
		name := ns + "-pv"
		label := map[string]string{testLabel: "true", "e2e.csi-fat.io/api": ns}
		spec := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: label},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				// A driver nothing runs: the object is never used.
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver: "api-client.e2e.csi-fat.io", VolumeHandle: name,
				}},
				StorageClassName: "e2e-none",
			},
		}
		made, err := pvs.Create(ctx, spec, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Cleanup(func() {
			if _, err := e.kubectlErr("delete", "pv", name, "--ignore-not-found"); err != nil {
				t.Errorf("removing PV %s: %v", name, err)
			}
		})
		if _, err := pvs.Create(ctx, spec, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Errorf("second create: %v, want AlreadyExists", err)
		}
		list, err := pvs.List(ctx, metav1.ListOptions{LabelSelector: "e2e.csi-fat.io/api=" + ns})
		if err != nil || len(list.Items) != 1 || list.Items[0].UID != made.UID {
			t.Fatalf("list: %v, %d items", err, len(list.Items))
		}
		patched, err := pvs.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e.csi-fat.io/mark":"gone"}}}`), metav1.PatchOptions{})
		if err != nil || patched.Labels["e2e.csi-fat.io/mark"] != "gone" || patched.ResourceVersion == made.ResourceVersion {
			t.Fatalf("patch: %v, labels %v", err, patched.Labels)
		}
		if _, err := pvs.Patch(ctx, "no-such-pv", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("patch of a missing PV: %v, want NotFound", err)
		}
		// The driver deletes a PV only as it listed it: a changed one is left alone.
		stale := made.ResourceVersion
		err = pvs.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &made.UID, ResourceVersion: &stale}})
		if !apierrors.IsConflict(err) {
			t.Errorf("delete of a changed PV: %v, want Conflict", err)
		}
		current := patched.ResourceVersion
		if err := pvs.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &made.UID, ResourceVersion: &current}}); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if err := pvs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("second delete: %v, want NotFound or none (still finalizing)", err)
		}
	})
}
