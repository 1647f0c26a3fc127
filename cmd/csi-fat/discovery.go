package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/csi-fat/csi-fat/internal/kubeapi"
	"github.com/csi-fat/csi-fat/node/discovery"
)

// discoveryFlags say how discovery mode publishes the node's removable media as
// PersistentVolumes (--media-discovery).
type discoveryFlags struct {
	enabled, blank bool
	storageClass   string
	reclaimPolicy  string
	parameters     listFlag
	mountOptions   listFlag
	interval       time.Duration
}

func (d *discoveryFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.enabled, "media-discovery", false, "discovery mode: publish every usable medium of the removable-media pool (needs --media-pool) as a PersistentVolume of its own, labelled with the node, serial, vendor, model, file system label and size, for claims to pick with a label selector; needs the API server (in-cluster)")
	fs.StringVar(&d.storageClass, "media-discovery-storage-class", "csi-fat-discovered", "storageClassName of the discovered media's PVs (\"\": none)")
	fs.StringVar(&d.reclaimPolicy, "media-discovery-reclaim-policy", string(corev1.PersistentVolumeReclaimDelete), "reclaim policy of the discovered media's PVs: Delete (a released medium, its files kept, is published again as a fresh PV) or Retain")
	fs.BoolVar(&d.blank, "media-discovery-blank", false, "publish blank media too, formatted with the parameters (layout, fatType, label, ...); else only media that hold FAT, adopted with their files")
	fs.Var(&d.parameters, "media-discovery-parameter", "key=value: a StorageClass parameter of the discovered volumes (mode, onDamage, codepage, cacheSize; for blank media also layout, fatType, clusterSize, label, fats; vendor, model, serial, byId, byPath, fsLabel: shell patterns choosing the media published); repeatable")
	fs.Var(&d.mountOptions, "media-discovery-mount-option", "a mount option of the discovered media's PVs (uid=, umask=, ...); repeatable")
	fs.DurationVar(&d.interval, "media-discovery-interval", 5*time.Second, "how often discovery mode looks at the media and at its PVs")
}

// config builds the discovery configuration with an in-cluster API client, or nil when off.
func (d *discoveryFlags) config() (*discovery.Config, error) {
	if !d.enabled {
		return nil, nil
	}
	c := &discovery.Config{
		StorageClass:  d.storageClass,
		ReclaimPolicy: corev1.PersistentVolumeReclaimPolicy(d.reclaimPolicy),
		Blank:         d.blank,
		MountOptions:  d.mountOptions,
		Interval:      d.interval,
		Parameters:    map[string]string{},
	}
	for _, p := range d.parameters {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--media-discovery-parameter %q: want key=value", p)
		}
		c.Parameters[k] = v
	}
	client, err := kubeapi.InCluster("csi-fat-discovery")
	if err != nil {
		return nil, fmt.Errorf("--media-discovery: %w", err)
	}
	c.Client = client.PersistentVolumes()
	return c, nil
}
