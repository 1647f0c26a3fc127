// Package kubeapi is the driver's own client of the Kubernetes API: the pods it runs its mounters
// in and the PersistentVolumes media discovery publishes, and nothing else.
//
// It is client-go's REST client over a scheme of core/v1 alone, not client-go's typed clientset:
// linking the clientset registers every API group Kubernetes has at process start
// (k8s.io/client-go/kubernetes/scheme), and csi-fat is one binary, so every process it runs would
// pay for it: each mounter, each prober, each `csi-fat mount` mapped about 10 MiB more of the
// binary at start, for API groups only the node plugin's two callers could ever use, and those
// use two resources of one group. The methods keep the typed clientset's signatures.
package kubeapi

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// codecs know core/v1 and the meta/v1 types the API server answers with (Status, options). They
// are made by the first client, not at start: most of csi-fat's processes never make one.
var codecs = sync.OnceValues(func() (serializer.CodecFactory, runtime.ParameterCodec) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(err) // registration of compiled-in types: a programming error, not input
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(scheme), runtime.NewParameterCodec(scheme)
})

// Client reaches the core/v1 resources the driver manages.
type Client struct {
	rc     rest.Interface
	params runtime.ParameterCodec
}

// InCluster is a client with the pod's service account, its requests named userAgent.
func InCluster(userAgent string) (*Client, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("the API server: %w", err)
	}
	cfg.UserAgent = userAgent
	return New(cfg)
}

// New is a client for cfg (which it does not change).
func New(cfg *rest.Config) (*Client, error) {
	c := *cfg
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	cf, pc := codecs()
	c.NegotiatedSerializer = cf.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(&c)
	if err != nil {
		return nil, fmt.Errorf("API client for %s: %w", cfg.Host, err)
	}
	return &Client{rc: rc, params: pc}, nil
}

// Pods are the pods of one namespace.
func (c *Client) Pods(namespace string) *Pods {
	return &Pods{rc: c.rc, params: c.params, ns: namespace}
}

// PersistentVolumes are the cluster's PersistentVolumes.
func (c *Client) PersistentVolumes() *PersistentVolumes {
	return &PersistentVolumes{rc: c.rc, params: c.params}
}

// Pods reaches the pods of one namespace.
type Pods struct {
	rc     rest.Interface
	params runtime.ParameterCodec
	ns     string
}

func (p *Pods) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := p.rc.Get().Namespace(p.ns).Resource("pods").Name(name).
		VersionedParams(&opts, p.params).Do(ctx).Into(out)
	return out, err
}

func (p *Pods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := p.rc.Get().Namespace(p.ns).Resource("pods").
		VersionedParams(&opts, p.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (p *Pods) Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := p.rc.Post().Namespace(p.ns).Resource("pods").
		VersionedParams(&opts, p.params).Body(pod).Do(ctx).Into(out)
	return out, err
}

func (p *Pods) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return p.rc.Delete().Namespace(p.ns).Resource("pods").Name(name).Body(&opts).Do(ctx).Error()
}

// PersistentVolumes reaches the cluster's PersistentVolumes.
type PersistentVolumes struct {
	rc     rest.Interface
	params runtime.ParameterCodec
}

func (v *PersistentVolumes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PersistentVolumeList, error) {
	out := &corev1.PersistentVolumeList{}
	err := v.rc.Get().Resource("persistentvolumes").
		VersionedParams(&opts, v.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (v *PersistentVolumes) Create(ctx context.Context, pv *corev1.PersistentVolume, opts metav1.CreateOptions) (*corev1.PersistentVolume, error) {
	out := &corev1.PersistentVolume{}
	err := v.rc.Post().Resource("persistentvolumes").
		VersionedParams(&opts, v.params).Body(pv).Do(ctx).Into(out)
	return out, err
}

func (v *PersistentVolumes) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return v.rc.Delete().Resource("persistentvolumes").Name(name).Body(&opts).Do(ctx).Error()
}

func (v *PersistentVolumes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.PersistentVolume, error) {
	out := &corev1.PersistentVolume{}
	err := v.rc.Patch(pt).Resource("persistentvolumes").Name(name).SubResource(subresources...).
		VersionedParams(&opts, v.params).Body(data).Do(ctx).Into(out)
	return out, err
}

// timeout is the time limit a list asks for, as the typed clientset sets it (0: none).
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
