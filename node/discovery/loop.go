package discovery

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/volume"
)

// discoveryRetry is how long a medium that could not be made a volume (its file system needs
// repair, say) is left alone before it is tried again; pulling it out and in tries at once.
const discoveryRetry = time.Minute

// Volumes is what the loop needs of the node's volumes (node.Manager is one).
type Volumes interface {
	NodeID() string
	TopologyKey() string
	USBEnabled() bool
	// MediaStatus looks at every device the removable-media pool's scan sees.
	MediaStatus() ([]media.Status, error)
	// DiscoveredVolumes are the node's volumes the loop made (named VolumeName).
	DiscoveredVolumes() []volume.Record
	// CreateDiscoveredVolume makes the volume for a medium, whole (partition "") or one FAT
	// partition of it, and returns it with its file system's label.
	CreateDiscoveredVolume(cfg *Config, medium media.Status, partition string) (volume.Record, string, error)
	DeleteVolume(ctx context.Context, volumeID string) error
}

// discovery is the loop's memory between rounds.
type discovery struct {
	m   Volumes
	cfg *Config
	// failed holds when making a volume last failed, by what it was to hold.
	failed map[discoveredUnit]time.Time
	// fsLabels holds the file system label found when a volume was made, by volume name, for a
	// PV published again.
	fsLabels map[string]string
}

// Run runs discovery mode on m until ctx is done: every cfg.Interval one round (see
// planDiscovery). cfg must have been prepared.
func Run(ctx context.Context, cfg *Config, m Volumes) {
	if !m.USBEnabled() {
		klog.ErrorS(nil, "media discovery needs the removable-media pool (--media-pool); not running")
		return
	}
	d := &discovery{m: m, cfg: cfg, failed: map[discoveredUnit]time.Time{}, fsLabels: map[string]string{}}
	klog.InfoS("media discovery running", "storageClass", cfg.StorageClass, "reclaimPolicy", cfg.ReclaimPolicy, "blank", cfg.Blank, "interval", cfg.Interval)
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		if err := d.round(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "media discovery round")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round looks once and acts on what it sees. The PVs are listed first, then the volumes read,
// then the media: the provisioner deletes a released volume before its PV, so a volume seen
// without its PV is one whose PV is really missing, never one being deleted.
func (d *discovery) round(ctx context.Context) error {
	list, err := d.cfg.Client.List(ctx, metav1.ListOptions{LabelSelector: discoverySelector(d.cfg.DriverName, d.m.NodeID())})
	if err != nil {
		return fmt.Errorf("list PersistentVolumes: %w", err)
	}
	vols := d.m.DiscoveredVolumes()
	looked, err := d.m.MediaStatus()
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, m := range looked {
		present[m.ID] = true
	}
	for u := range d.failed {
		if !present[u.Medium] {
			delete(d.failed, u) // pulled out: plugged in again, it is tried at once
		}
	}
	for _, a := range planDiscovery(d.cfg.DriverName, d.m.NodeID(), looked, vols, list.Items, d.cfg.Blank, d.cfg.selects) {
		if err := d.do(ctx, a); err != nil {
			klog.ErrorS(err, "media discovery", "action", a.Kind, "volume", a.Name, "medium", a.Medium.ID)
		}
	}
	return nil
}

// do carries out one action.
func (d *discovery) do(ctx context.Context, a discoveryAction) error {
	pvs := d.cfg.Client
	switch a.Kind {
	case discoverCreate:
		unit := discoveredUnit{a.Medium.ID, a.Partition}
		if t, ok := d.failed[unit]; ok && time.Since(t) < discoveryRetry {
			return nil
		}
		rec, label, err := d.m.CreateDiscoveredVolume(d.cfg, a.Medium, a.Partition)
		if err != nil {
			d.failed[unit] = time.Now()
			return fmt.Errorf("medium %s (%s) not published: %w", a.Medium.ID, a.Medium.Kernel, err)
		}
		d.fsLabels[a.Name] = label
		return d.publish(ctx, rec, a.Medium)
	case discoverPublish:
		return d.publish(ctx, *a.Volume, a.Medium)
	case discoverRemove:
		// Only the PV as listed: if a claim was bound to it since, the delete fails.
		rv := a.PV.ResourceVersion
		err := pvs.Delete(ctx, a.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &a.PV.UID, ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete PersistentVolume %s of pulled medium %s: %w", a.Name, a.PV.Annotations[d.cfg.DriverName+annSuffixMedium], err)
		}
		klog.InfoS("media discovery: unbound PV deleted", "pv", a.Name, "medium", a.PV.Annotations[d.cfg.DriverName+annSuffixMedium], "why", a.Why)
		if a.Volume == nil {
			return nil
		}
		return d.forget(ctx, *a.Volume)
	case discoverForget:
		return d.forget(ctx, *a.Volume)
	case discoverMark, discoverUnmark:
		gone := a.Kind == discoverMark
		if _, err := pvs.Patch(ctx, a.Name, types.MergePatchType, d.cfg.markPatch(gone, time.Now()), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("%s PersistentVolume %s: %w", a.Kind, a.Name, err)
		}
		if gone {
			klog.InfoS("media discovery: medium of a bound PV pulled out; PV marked present=false", "pv", a.Name, "claim", claimOf(a.PV))
		} else {
			klog.InfoS("media discovery: medium of a bound PV back; mark cleared", "pv", a.Name, "claim", claimOf(a.PV))
		}
	}
	return nil
}

func claimOf(pv *corev1.PersistentVolume) string {
	if r := pv.Spec.ClaimRef; r != nil {
		return r.Namespace + "/" + r.Name
	}
	return ""
}

// publish makes the PV of a discovered volume; one that exists already is left as it is.
func (d *discovery) publish(ctx context.Context, rec volume.Record, m media.Status) error {
	pv := d.cfg.discoveredPV(d.m.NodeID(), d.m.TopologyKey(), rec, m, d.fsLabels[rec.Name])
	if _, err := d.cfg.Client.Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PersistentVolume %s of medium %s: %w", rec.Name, rec.Device, err)
	}
	klog.InfoS("media discovery: medium published", "pv", rec.Name, "volume", rec.ID, "medium", rec.Device, "size", rec.Size, "labels", pv.Labels)
	return nil
}

// forget deletes the volume of a pulled medium (its record: a discovered volume is kept on its
// medium, reclaim keep, so nothing is written).
func (d *discovery) forget(ctx context.Context, rec volume.Record) error {
	if err := d.m.DeleteVolume(ctx, rec.ID); err != nil {
		return fmt.Errorf("forget volume %s of pulled medium %s: %w", rec.ID, rec.Device, err)
	}
	delete(d.fsLabels, rec.Name)
	return nil
}
