package mounters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/node/volume"
)

// Pod serves each volume in a pod of its own on this node, created through the API: the
// pod is unprivileged and outlives the plugin's container, and a helm upgrade leaves it on its
// image until its volume is unstaged.
const Pod = "pod"

// PodClient is what mounter pods need of the API server: the pods of a namespace.
// internal/kubeapi's Pods is one; client-go's typed pod client is another.
type PodClient interface {
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
}

// PodConfig says how mounter pods are made.
type PodConfig struct {
	// Pods reaches the API server's pods of a namespace (in-cluster config).
	Pods func(namespace string) PodClient `json:"-"`
	// Namespace the pods live in: the plugin's own.
	Namespace string `json:"namespace"`
	// Image runs `csi-fat mounter` (its entrypoint is csi-fat); normally the plugin's own.
	Image      string `json:"image"`
	PullPolicy string `json:"pullPolicy,omitempty"`
	// KubeletDir is the kubelet's root directory as this process sees it: the pods' emptyDir
	// volumes, where mounter sockets live, are under <KubeletDir>/pods.
	KubeletDir        string   `json:"kubeletDir"`
	PriorityClassName string   `json:"priorityClassName,omitempty"`
	ImagePullSecrets  []string `json:"imagePullSecrets,omitempty"`
	// CPURequest and MemoryRequest are every mounter pod's requests; MemoryOverhead plus the
	// volume's cache size is its memory limit (0: no limit).
	CPURequest     resource.Quantity `json:"cpuRequest"`
	MemoryRequest  resource.Quantity `json:"memoryRequest"`
	MemoryOverhead resource.Quantity `json:"memoryOverhead"`
	// StartTimeout bounds how long a pod may take to listen (pulling its image included).
	StartTimeout time.Duration `json:"startTimeout,omitempty"`
	// Owner, when set, owns every mounter pod (the plugin's DaemonSet): deleting it removes them.
	Owner *metav1.OwnerReference `json:"-"`
}

// Names, labels and annotations of mounter pods.
const (
	mounterPodPrefix      = "csi-fat-mounter-"
	mounterContainer      = "mounter"
	mounterComponentLabel = "app.kubernetes.io/component"
	mounterComponent      = "mounter"
	mounterNameLabel      = "app.kubernetes.io/name"
	mounterVolumeLabel    = "fat.csi-fat.io/volume-hash"
	mounterVolumeAnnot    = "fat.csi-fat.io/volume"
	// mounterSocketDir is where the pod's emptyDir, named mounterSocketVol, is mounted.
	mounterSocketDir  = "/run/csi-fat-mounter"
	mounterSocketVol  = "control"
	mounterSocketName = "control.sock"
)

// How long pods may take.
const (
	defaultPodStart = 2 * time.Minute
	podPollInterval = 100 * time.Millisecond
	podDeleteWait   = 30 * time.Second
	podAPITimeout   = 30 * time.Second
)

// podRef names a mounter pod.
type podRef struct {
	namespace, name string
	uid             types.UID
}

func (r podRef) String() string { return r.namespace + "/" + r.name }

// volumeHash is a short digest of a volume's ID or name, safe in a label value and a path.
func volumeHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:8])
}

// podSocket is where the plugin reaches the socket of the mounter pod with the given UID: in its
// emptyDir, under the kubelet's pods directory.
func (c *PodConfig) podSocket(uid types.UID) string {
	return filepath.Join(c.KubeletDir, "pods", string(uid), "volumes", "kubernetes.io~empty-dir", mounterSocketVol, mounterSocketName)
}

// mounterPodSpec is the pod serving one volume: on this node, unprivileged and admissible under
// the restricted Pod Security level, critical, tolerating every taint, with nothing from the
// host: its descriptors arrive over the socket in its emptyDir.
func (l *Launcher) podSpec(rec volume.Record) *corev1.Pod {
	c := l.cfg.Pod
	yes, no := true, false
	user := int64(nobody)
	if u := l.cfg.UID; u != nil {
		user = int64(*u)
	}
	group := int64(nobody)
	if g := l.cfg.GID; g != nil {
		group = int64(*g)
	}
	grace := int64(30)
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if !c.CPURequest.IsZero() {
		res.Requests[corev1.ResourceCPU] = c.CPURequest
	}
	if !c.MemoryRequest.IsZero() {
		res.Requests[corev1.ResourceMemory] = c.MemoryRequest
	}
	if bound := l.MemoryBound(rec); bound > 0 {
		if l.imageInMemory(rec) {
			// The image's pages the mounter writes are charged to its pod and cannot be
			// reclaimed: they are the volume itself.
			bound += max(rec.Size, rec.MaxSize)
		}
		limit := *resource.NewQuantity(bound, resource.BinarySI)
		res.Limits[corev1.ResourceMemory] = limit
		if q, ok := res.Requests[corev1.ResourceMemory]; ok && q.Cmp(limit) > 0 {
			res.Requests[corev1.ResourceMemory] = limit
		}
	}
	var owners []metav1.OwnerReference
	if c.Owner != nil {
		owners = append(owners, *c.Owner)
	}
	var secrets []corev1.LocalObjectReference
	for _, s := range c.ImagePullSecrets {
		secrets = append(secrets, corev1.LocalObjectReference{Name: s})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: mounterPodPrefix,
			Namespace:    c.Namespace,
			Labels: map[string]string{
				mounterNameLabel:      "csi-fat",
				mounterComponentLabel: mounterComponent,
				mounterVolumeLabel:    volumeHash(rec.ID),
			},
			Annotations:     map[string]string{mounterVolumeAnnot: rec.ID},
			OwnerReferences: owners,
		},
		Spec: corev1.PodSpec{
			NodeName:                      l.nodeID,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			PriorityClassName:             c.PriorityClassName,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: &grace,
			ImagePullSecrets:              secrets,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				RunAsUser:      &user,
				RunAsGroup:     &group,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            mounterContainer,
				Image:           c.Image,
				ImagePullPolicy: corev1.PullPolicy(c.PullPolicy),
				Args:            []string{"mounter", "--socket=" + mounterSocketDir + "/" + mounterSocketName},
				Resources:       res,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					Privileged:               &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts:             []corev1.VolumeMount{{Name: mounterSocketVol, MountPath: mounterSocketDir}},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{{Name: mounterSocketVol, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// MemoryBound is the memory the mounter of rec's volume may use itself, 0 for no bound: its pod's
// memory overhead plus the volume's cache size, in pod mode. The pod's limit adds an image in a
// pool on tmpfs (podSpec); the mounter sets the Go runtime's limit from this.
func (l *Launcher) MemoryBound(rec volume.Record) int64 {
	c := l.cfg.Pod
	if l.cfg.Mode != Pod || c == nil || c.MemoryOverhead.IsZero() {
		return 0
	}
	cache := rec.Params.CacheBytes
	if cache <= 0 {
		cache = volume.DefaultCacheBytes
	}
	return c.MemoryOverhead.Value() + cache
}

// imageInMemory tells whether the volume is an image in a pool on tmpfs or ramfs.
func (l *Launcher) imageInMemory(rec volume.Record) bool {
	if rec.Params.Pool != volume.PoolImage {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(l.poolDir, &st); err != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}

// startMounterPod creates the pod serving a volume and waits until it listens.
func (l *Launcher) startPod(rec volume.Record) (*Mounter, error) {
	c := l.cfg.Pod
	ctx, cancel := context.WithTimeout(context.Background(), podAPITimeout)
	pod, err := c.Pods(c.Namespace).Create(ctx, l.podSpec(rec), metav1.CreateOptions{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("create mounter pod for %s: %w", rec.ID, err)
	}
	ref := podRef{namespace: pod.Namespace, name: pod.Name, uid: pod.UID}
	socket := c.podSocket(pod.UID)
	p := &Mounter{volume: rec.ID, socket: socket, pod: &ref, podCfg: c, gone: make(chan struct{})}
	klog.InfoS("created mounter pod", "volume", rec.ID, "pod", ref.String(), "uid", ref.uid)
	if err := p.waitListening(); err != nil {
		p.Kill()
		return nil, err
	}
	if err := p.watch(); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// waitListening waits until the pod's mounter answers on its socket, failing early when the
// pod cannot start (its image cannot be pulled, it ended).
func (p *Mounter) waitListening() error {
	timeout := p.podCfg.StartTimeout
	if timeout <= 0 {
		timeout = defaultPodStart
	}
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		c, err := dial(p.socket, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		last = err
		pod, err := p.getPod()
		if err != nil {
			return err
		}
		if why := podStuck(pod); why != "" {
			return fmt.Errorf("mounter pod %s: %s", p.pod, why)
		}
		time.Sleep(podPollInterval)
	}
	return fmt.Errorf("mounter pod %s did not listen at %s within %v: %v", p.pod, p.socket, timeout, last)
}

// podStuck says why a pod will never serve, or "".
func podStuck(pod *corev1.Pod) string {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return "ended: " + podEnding(pod)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return fmt.Sprintf("%s: %s", w.Reason, w.Message)
			}
		}
	}
	return ""
}

// podEnding says how a pod's mounter container ended, as far as its status tells.
func podEnding(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			s := fmt.Sprintf("%s (exit code %d", t.Reason, t.ExitCode)
			if t.Signal != 0 {
				s += fmt.Sprintf(", signal %d", t.Signal)
			}
			s += ")"
			if msg := strings.TrimSpace(t.Message); msg != "" {
				if len(msg) > 300 {
					msg = "…" + msg[len(msg)-300:]
				}
				s += ": " + msg
			}
			return s
		}
	}
	if pod.DeletionTimestamp != nil {
		return "deleted"
	}
	return string(pod.Status.Phase)
}

func (p *Mounter) getPod() (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), podAPITimeout)
	defer cancel()
	pod, err := p.podCfg.Pods(p.pod.namespace).Get(ctx, p.pod.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("mounter pod %s: %w", p.pod, err)
	}
	if pod.UID != p.pod.uid {
		return nil, fmt.Errorf("mounter pod %s: %w", p.pod, errPodReplaced)
	}
	return pod, nil
}

var errPodReplaced = errors.New("replaced by another pod of that name")

// podGone tells whether getPod's error says the pod no longer exists (a failed API call does not).
func podGone(err error) bool {
	return apierrors.IsNotFound(err) || errors.Is(err, errPodReplaced)
}

// podEnded says how the pod ended, once its control connection did: the kubelet may take a
// moment to report the container's end.
func (p *Mounter) podEnded(connErr error) string {
	why := fmt.Sprintf("its control connection ended (%v)", connErr)
	for i := 0; i < 30; i++ {
		pod, err := p.getPod()
		if err != nil {
			if podGone(err) {
				why = "deleted"
			}
			break
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded || pod.DeletionTimestamp != nil {
			why = podEnding(pod)
			break
		}
		time.Sleep(podPollInterval)
	}
	return fmt.Sprintf("the mounter pod %s ended: %s; see kubectl logs -n %s %s", p.pod, why, p.pod.namespace, p.pod.name)
}

// deletePod removes the pod with a grace period of a second (either its volume was unmounted
// and it has exited, or it must end now) and waits until it is gone. Not zero: that would remove
// the object before the kubelet has ended the process, and the caller needs it ended.
func (p *Mounter) deletePod() {
	c := p.podCfg.Pods(p.pod.namespace)
	grace := int64(1)
	ctx, cancel := context.WithTimeout(context.Background(), podAPITimeout)
	err := c.Delete(ctx, p.pod.name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &p.pod.uid}})
	cancel()
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.ErrorS(err, "deleting mounter pod", "pod", p.pod.String())
		return
	}
	deadline := time.Now().Add(podDeleteWait)
	for time.Now().Before(deadline) {
		if _, err := p.getPod(); podGone(err) {
			klog.InfoS("deleted mounter pod", "volume", p.volume, "pod", p.pod.String())
			return
		}
		time.Sleep(podPollInterval)
	}
	klog.InfoS("mounter pod not gone yet; the kubelet will finish its deletion", "volume", p.volume, "pod", p.pod.String(), "waited", podDeleteWait)
}

// mounterPods lists the mounter pods on this node.
func (l *Launcher) listPods() ([]corev1.Pod, error) {
	c := l.cfg.Pod
	ctx, cancel := context.WithTimeout(context.Background(), podAPITimeout)
	defer cancel()
	list, err := c.Pods(c.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{mounterComponentLabel: mounterComponent, mounterNameLabel: "csi-fat"}).String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", l.nodeID).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list mounter pods on node %s: %w", l.nodeID, err)
	}
	return list.Items, nil
}

// podMounter is the Mounter of a pod found by listing.
func (l *Launcher) podMounter(pod *corev1.Pod) *Mounter {
	c := l.cfg.Pod
	return &Mounter{
		volume: pod.Annotations[mounterVolumeAnnot],
		socket: c.podSocket(pod.UID),
		pod:    &podRef{namespace: pod.Namespace, name: pod.Name, uid: pod.UID},
		podCfg: c,
		gone:   make(chan struct{}),
	}
}

// removeOrphanMounterPods removes every mounter pod on this node that no staged volume's record
// names: a live one's mount is unmounted unless a staged volume lives there, and it is asked to
// stop first, so that it writes its volume back.
func (l *Launcher) removeOrphanPods(staged Staged) {
	pods, err := l.listPods()
	if err != nil {
		klog.ErrorS(err, "looking for orphaned mounter pods")
		return
	}
	known := map[types.UID]bool{}
	staging := map[string]bool{}
	for _, st := range staged() {
		staging[st.Path] = true
		if st.Mounter != nil && st.Mounter.PodUID != "" {
			known[types.UID(st.Mounter.PodUID)] = true
		}
	}
	for i := range pods {
		pod := &pods[i]
		if known[pod.UID] || pod.DeletionTimestamp != nil {
			continue
		}
		p := l.podMounter(pod)
		if pod.Status.Phase == corev1.PodRunning {
			l.stopOrphan(p, staging)
		}
		klog.InfoS("removing an orphaned mounter pod", "pod", p.pod.String(), "volume", p.volume, "phase", pod.Status.Phase)
		p.deletePod()
	}
}
