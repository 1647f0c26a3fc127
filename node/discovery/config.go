package discovery

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/volume"
)

// PVClient is what media discovery needs of the API server's PersistentVolumes.
// internal/kubeapi's PersistentVolumes is one; client-go's typed client is another.
type PVClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PersistentVolumeList, error)
	Create(ctx context.Context, pv *corev1.PersistentVolume, opts metav1.CreateOptions) (*corev1.PersistentVolume, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.PersistentVolume, error)
}

// Config configures discovery mode: every usable medium of the removable-media pool on
// the node becomes a volume of its own, published as a PersistentVolume that a claim picks by
// its labels.
type Config struct {
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
func (c *Config) Prepare() error {
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
func (c *Config) selects(m media.Status) bool {
	if m.State == media.StateBlank && c.adopt.FSLabel != "" {
		return false
	}
	d := media.Device{ID: m.ID, Vendor: m.Vendor, Model: m.Model, Serial: m.Serial, ByID: m.ByID, ByPath: m.ByPath}
	return media.Mismatch(c.adopt.Selection, d) == ""
}

// AdoptParams are the parameters of a volume made for a medium that holds FAT, kept with its files.
func (c *Config) AdoptParams() volume.Params { return c.adopt }

// FormatParams are the parameters of a volume made for a blank medium, formatted.
func (c *Config) FormatParams() volume.Params { return c.format }
