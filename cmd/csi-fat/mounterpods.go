package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fat/csi-fat/internal/kubeapi"
	"github.com/csi-fat/csi-fat/node/mounters"
)

// podFlags say how mounter pods are made (--mounter=pod).
type podFlags struct {
	image, namespace, pullPolicy, priorityClass, kubeletDir string
	cpuRequest, memoryRequest, memoryOverhead               string
	pullSecrets                                             listFlag
	startTimeout                                            time.Duration
}

func (p *podFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.image, "mounter-image", os.Getenv("MOUNTER_IMAGE"), "image of mounter pods, whose entrypoint is csi-fat: normally the driver's own (default: $MOUNTER_IMAGE)")
	fs.StringVar(&p.namespace, "mounter-namespace", os.Getenv("POD_NAMESPACE"), "namespace of mounter pods: the driver's own (default: $POD_NAMESPACE)")
	fs.StringVar(&p.pullPolicy, "mounter-pull-policy", "IfNotPresent", "image pull policy of mounter pods")
	fs.StringVar(&p.priorityClass, "mounter-priority-class", "system-node-critical", "priority class of mounter pods (\"\": none)")
	fs.StringVar(&p.kubeletDir, "kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory as the driver sees it; mounter pods' sockets are in their emptyDir volumes under <dir>/pods")
	fs.StringVar(&p.cpuRequest, "mounter-cpu-request", "10m", "CPU request of every mounter pod (\"\": none)")
	fs.StringVar(&p.memoryRequest, "mounter-memory-request", "32Mi", "memory request of every mounter pod (\"\": none)")
	fs.StringVar(&p.memoryOverhead, "mounter-memory-overhead", "160Mi", "a mounter pod's memory limit is this plus its volume's cache size (StorageClass parameter cacheSize, default 64Mi); \"\" or 0: no limit")
	fs.Var(&p.pullSecrets, "mounter-image-pull-secret", "image pull secret of mounter pods (repeatable)")
	fs.DurationVar(&p.startTimeout, "mounter-start-timeout", 2*time.Minute, "how long a mounter pod may take to start listening, pulling its image included")
}

// config builds the pods' configuration with an in-cluster API client.
func (p *podFlags) config() (*mounters.PodConfig, error) {
	if p.image == "" || p.namespace == "" {
		return nil, fmt.Errorf("--mounter=pod needs --mounter-image and --mounter-namespace (or $MOUNTER_IMAGE and $POD_NAMESPACE)")
	}
	c := &mounters.PodConfig{
		Namespace: p.namespace, Image: p.image, PullPolicy: p.pullPolicy, KubeletDir: p.kubeletDir,
		PriorityClassName: p.priorityClass, ImagePullSecrets: p.pullSecrets, StartTimeout: p.startTimeout,
	}
	for _, q := range []struct {
		flag, val string
		dst       *resource.Quantity
	}{{"--mounter-cpu-request", p.cpuRequest, &c.CPURequest}, {"--mounter-memory-request", p.memoryRequest, &c.MemoryRequest}, {"--mounter-memory-overhead", p.memoryOverhead, &c.MemoryOverhead}} {
		if q.val == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.val)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", q.flag, q.val, err)
		}
		*q.dst = v
	}
	client, err := kubeapi.InCluster("csi-fat")
	if err != nil {
		return nil, fmt.Errorf("--mounter=pod: %w", err)
	}
	c.Pods = func(namespace string) mounters.PodClient { return client.Pods(namespace) }
	if self := os.Getenv("POD_NAME"); self != "" {
		if c.Owner, err = controllerOf(c.Pods(p.namespace), p.namespace, self); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// controllerOf is the controller (the DaemonSet) of the driver's own pod: mounter pods name it
// as their owner, so that uninstalling the driver removes them, while an upgrade, which keeps
// the DaemonSet, leaves them serving.
func controllerOf(pods mounters.PodClient, namespace, pod string) (*metav1.OwnerReference, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	self, err := pods.Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--mounter=pod: reading the driver's own pod %s/%s: %w", namespace, pod, err)
	}
	ref := metav1.GetControllerOf(self)
	if ref == nil {
		return nil, nil
	}
	no := false
	owner := *ref
	owner.Controller, owner.BlockOwnerDeletion = &no, &no
	return &owner, nil
}
