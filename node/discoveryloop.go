package node

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/volume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// PVClient is what media discovery needs of the API server's PersistentVolumes.
// internal/kubeapi's PersistentVolumes is one; client-go's typed client is another.
type PVClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PersistentVolumeList, error)
	Create(ctx context.Context, pv *corev1.PersistentVolume, opts metav1.CreateOptions) (*corev1.PersistentVolume, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.PersistentVolume, error)
}

// DiscoveryConfig configures discovery mode: every usable medium of the removable-media pool on
// the node becomes a volume of its own, published as a PersistentVolume that a claim picks by
// its labels.
type DiscoveryConfig struct {
	// DriverName is the CSI driver's name: the PVs' driver, the prefix of their labels, and the
	// provisioner whose node sidecar deletes a released PV.
	DriverName string
	// StorageClass is the PVs' storageClassName (claims name it too); "" for none.
	StorageClass string
	// ReclaimPolicy is the PVs' persistentVolumeReclaimPolicy: Delete gives a released medium
	// back (its files kept) as a fresh PV; Retain keeps the released PV and the medium with it.
	ReclaimPolicy corev1.PersistentVolumeReclaimPolicy
	// Blank publishes blank media too, formatted with Parameters (else only media that hold a
	// FAT file system, adopted with their files).
	Blank bool
	// Parameters are StorageClass parameters of the volumes: mode, onDamage, codepage,
	// cacheSize for all; layout, fatType, clusterSize, label, fats for blank media formatted;
	// and vendor, model, serial, byId, byPath, fsLabel: patterns that choose which media are
	// published (a blank medium has no file system label: with fsLabel none is published).
	Parameters map[string]string
	// MountOptions are the PVs' mountOptions.
	MountOptions []string
	// Interval is how often the media and the PVs are looked at.
	Interval time.Duration
	// Client reaches the API server's PersistentVolumes.
	Client PVClient

	adopt, format volume.Params
}

// Parameters discovery mode sets itself, or that make no sense for it.
var discoveryFixedParams = []string{volume.ParamPool, volume.ParamAdopt, volume.ParamReclaim, volume.ParamWipe, volume.ParamMaxSize, volume.ParamPartition}

// Parameters about a new file system: for blank media only.
var discoveryFormatParams = []string{volume.ParamLayout, volume.ParamFATType, volume.ParamClusterSize, volume.ParamLabel, volume.ParamFATs}

// Prepare checks the configuration and works out the volumes' parameters.
func (c *DiscoveryConfig) Prepare() error {
	if c.DriverName == "" || strings.ToLower(c.DriverName) != c.DriverName {
		return fmt.Errorf("media discovery: driver name %q: want a lower-case name, the prefix of the PVs' labels", c.DriverName)
	}
	switch c.ReclaimPolicy {
	case corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRetain:
	default:
		return fmt.Errorf("media discovery: reclaim policy %q: want Delete or Retain", c.ReclaimPolicy)
	}
	if c.Interval <= 0 {
		return fmt.Errorf("media discovery: interval %v: want a positive duration", c.Interval)
	}
	adopt := map[string]string{volume.ParamPool: volume.PoolMedia, volume.ParamAdopt: "true"}
	format := map[string]string{volume.ParamPool: volume.PoolMedia}
	for k, v := range c.Parameters {
		for _, fixed := range discoveryFixedParams {
			if k == fixed {
				return fmt.Errorf("media discovery: parameter %s is not for discovered media (they are adopted with their files, or blank ones formatted, and kept on release)", k)
			}
		}
		if k != volume.ParamFSLabel {
			format[k] = v
		}
		isFormat := false
		for _, f := range discoveryFormatParams {
			isFormat = isFormat || k == f
		}
		if !isFormat {
			adopt[k] = v
		}
	}
	var err error
	if c.adopt, err = volume.ParseParams(adopt); err != nil {
		return fmt.Errorf("media discovery: %w", err)
	}
	if c.format, err = volume.ParseParams(format); err != nil {
		return fmt.Errorf("media discovery: %w", err)
	}
	return nil
}

// selects tells whether the parameters' patterns choose a medium, as far as can be told without
// reading its file system (the label is matched once it is checked).
func (c *DiscoveryConfig) selects(m MediumStatus) bool {
	if m.State == mediumBlank && c.adopt.FSLabel != "" {
		return false
	}
	d := media.Device{ID: m.ID, Vendor: m.Vendor, Model: m.Model, Serial: m.Serial, ByID: m.ByID, ByPath: m.ByPath}
	return media.Mismatch(c.adopt.Selection, d) == ""
}

// discoveryRetry is how long a medium that could not be made a volume (its file system needs
// repair, say) is left alone before it is tried again; pulling it out and in tries at once.
const discoveryRetry = time.Minute

// discovery is the loop's memory between rounds.
type discovery struct {
	m   *Manager
	cfg *DiscoveryConfig
	// failed holds when making a volume last failed, by what it was to hold.
	failed map[discoveredUnit]time.Time
	// fsLabels holds the file system label found when a volume was made, by volume name, for a
	// PV published again.
	fsLabels map[string]string
}

// RunDiscovery runs discovery mode until ctx is done: every cfg.Interval one round (see
// planDiscovery). cfg must have been prepared.
func (m *Manager) RunDiscovery(ctx context.Context, cfg *DiscoveryConfig) {
	if m.usb == nil {
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

// discoveredVolumes are the node's volumes discovery mode made: named after their device.
func (m *Manager) discoveredVolumes() []volume.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []volume.Record
	for _, v := range m.state.Volumes {
		if v.Device != "" && !v.Ephemeral && v.Name == discoveredName(m.cfg.NodeID, unitKey(v.Device, v.Partition)) {
			out = append(out, *v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// round looks once and acts on what it sees. The PVs are listed first, then the volumes read,
// then the media: the provisioner deletes a released volume before its PV, so a volume seen
// without its PV is one whose PV is really missing, never one being deleted.
func (d *discovery) round(ctx context.Context) error {
	list, err := d.cfg.Client.List(ctx, metav1.ListOptions{LabelSelector: discoverySelector(d.cfg.DriverName, d.m.cfg.NodeID)})
	if err != nil {
		return fmt.Errorf("list PersistentVolumes: %w", err)
	}
	vols := d.m.discoveredVolumes()
	media, err := d.m.MediaStatus()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, m := range media {
		seen[m.ID] = true
	}
	for u := range d.failed {
		if !seen[u.Medium] {
			delete(d.failed, u) // pulled out: plugged in again, it is tried at once
		}
	}
	for _, a := range planDiscovery(d.cfg.DriverName, d.m.cfg.NodeID, media, vols, list.Items, d.cfg.Blank, d.cfg.selects) {
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
func (d *discovery) publish(ctx context.Context, rec volume.Record, m MediumStatus) error {
	pv := d.cfg.discoveredPV(d.m.cfg.NodeID, d.m.cfg.TopologyKey, rec, m, d.fsLabels[rec.Name])
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

// CreateDiscoveredVolume makes the volume discovery mode publishes for a medium the pool's scan
// sees (MediaStatus), whole (partition "") or one FAT partition of it (its number, or a GPT
// partition's GUID): named after the node, the medium and the partition; holding the medium's
// FAT file system with its files (checked in a mounter, as adopt=true checks it), or, for a
// blank medium, a new one made with the configuration's parameters. It returns the volume and
// its file system's label.
func (m *Manager) CreateDiscoveredVolume(cfg *DiscoveryConfig, medium MediumStatus, partition string) (volume.Record, string, error) {
	if m.usb == nil {
		return volume.Record{}, "", status.Errorf(codes.FailedPrecondition, "the removable-media pool is not enabled on node %s", m.cfg.NodeID)
	}
	params := cfg.adopt
	params.Partition = partition
	if medium.State == mediumBlank {
		if !cfg.Blank {
			return volume.Record{}, "", status.Errorf(codes.FailedPrecondition, "removable medium %s is blank and blank media are not published", medium.ID)
		}
		params = cfg.format
	}
	var label string
	name := discoveredName(m.cfg.NodeID, unitKey(medium.ID, partition))
	rec, err := m.createVolume(name, 0, 0, params, m.claimMedium(medium.ID, &label))
	return rec, label, err
}

// claimMedium claims the named medium (or, adopting, the partition params.Partition names) for a
// discovered volume, the way claimUSB claims the one it picks: free (allowed, not used by the
// host, the part taken not claimed), then with adopt its file system checked in a mounter and
// kept (adoptUSB; its label put in *fsLabel), else formatted whole, when it is still blank.
// createVolume calls it with m.provision held.
func (m *Manager) claimMedium(id string, fsLabel *string) claimFunc {
	return func(_, _ int64, params volume.Params) (usbClaim, error) {
		free, claims, _, err := m.freeUSB()
		if err != nil {
			return usbClaim{}, status.Error(codes.Internal, err.Error())
		}
		for _, d := range free {
			if d.ID != id {
				continue
			}
			if params.Adopt {
				c, why := m.adoptUSB(d, claims[d.ID], func(int64) bool { return true }, params)
				if c == nil {
					return usbClaim{}, status.Errorf(codes.FailedPrecondition, "removable medium %s (%s): %s", d.ID, d.Kernel, strings.Join(why, "; "))
				}
				*fsLabel = c.label
				return *c, nil
			}
			if c := claims[d.ID]; c != nil {
				return usbClaim{}, status.Errorf(codes.FailedPrecondition, "removable medium %s: volumes hold its partitions (%s)", d.ID, c.volumes())
			}
			if state, _, why := m.probeMedium(d); state != mediumBlank {
				return usbClaim{}, status.Errorf(codes.FailedPrecondition, "removable medium %s (%s) is no longer blank: %s", d.ID, d.Kernel, why)
			}
			part, err := m.formatNewDevice(d.Path, params)
			if err != nil {
				return usbClaim{}, status.Errorf(claimCode(err, codes.Internal), "format removable medium %s (%s): %v", d.ID, d.Path, err)
			}
			*fsLabel = params.Label
			return usbClaim{dev: d, size: part.Size, label: params.Label}, nil
		}
		return usbClaim{}, status.Errorf(codes.FailedPrecondition, "removable medium %s is not free: pulled out, used by the host or claimed", id)
	}
}
