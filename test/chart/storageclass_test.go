package chart

import (
	"maps"
	"slices"
	"testing"

	"github.com/csi-fat/csi-fat/node"
)

func TestStorageClassDefaults(t *testing.T) {
	var sc storageClass
	if !render(t).named(t, "StorageClass", "csi-fat", &sc) {
		t.Fatal("no StorageClass csi-fat")
	}
	if sc.Provisioner != "fat.csi-fat.io" {
		t.Errorf("provisioner %q", sc.Provisioner)
	}
	// A volume exists on one node: binding waits for the pod's node.
	if sc.VolumeBindingMode != "WaitForFirstConsumer" {
		t.Errorf("volumeBindingMode %q", sc.VolumeBindingMode)
	}
	if sc.AllowVolumeExpansion == nil || *sc.AllowVolumeExpansion {
		t.Errorf("allowVolumeExpansion %v, want false set explicitly", sc.AllowVolumeExpansion)
	}
	if sc.ReclaimPolicy != "Delete" {
		t.Errorf("reclaimPolicy %q", sc.ReclaimPolicy)
	}
	if !maps.Equal(sc.Parameters, map[string]string{"pool": "image"}) {
		t.Errorf("parameters %v, want only pool=image", sc.Parameters)
	}
	if _, ok := sc.Metadata.Annotations["storageclass.kubernetes.io/is-default-class"]; ok {
		t.Error("image class is the default class without isDefault")
	}
	p, err := node.ParseParams(sc.Parameters)
	if err != nil || p.Pool != node.PoolImage {
		t.Errorf("driver parses the default class's parameters as %+v, %v", p, err)
	}
}

// TestStorageClassParameters sets every parameter through values, in the forms YAML gives them
// (numbers and booleans too), and checks that the driver's own parser reads them as meant.
func TestStorageClassParameters(t *testing.T) {
	r := render(t,
		"--set", "usb.enabled=true",
		"--set", "storageClasses.image.name=fat32",
		"--set", "storageClasses.image.isDefault=true",
		"--set", "storageClasses.image.reclaimPolicy=Retain",
		"--set-json", `storageClasses.image.parameters={"fatType":32,"clusterSize":"4K","label":"photos","fats":1,"mode":"sync"}`,
		"--set-json", `storageClasses.image.mountOptions=["noatime","shortname=mixed"]`,
		"--set-json", `storageClasses.usb.parameters={"adopt":true,"reclaim":"wipe","mode":"flush"}`,
	)

	var img storageClass
	if !r.named(t, "StorageClass", "fat32", &img) {
		t.Fatal("no StorageClass fat32")
	}
	want := map[string]string{"pool": "image", "fatType": "32", "clusterSize": "4K", "label": "photos", "fats": "1", "mode": "sync"}
	if !maps.Equal(img.Parameters, want) {
		t.Errorf("image class parameters %v, want %v", img.Parameters, want)
	}
	if img.Metadata.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("isDefault not annotated: %v", img.Metadata.Annotations)
	}
	if img.ReclaimPolicy != "Retain" || !slices.Equal(img.MountOptions, []string{"noatime", "shortname=mixed"}) {
		t.Errorf("reclaimPolicy %q mountOptions %v", img.ReclaimPolicy, img.MountOptions)
	}
	p, err := node.ParseParams(img.Parameters)
	if err != nil {
		t.Fatalf("driver rejects the image class's parameters %v: %v", img.Parameters, err)
	}
	if p.FATType != 32 || p.ClusterSize != 4096 || p.Label != "PHOTOS" || p.FATs != 1 || p.Mode != node.ModeSync {
		t.Errorf("driver reads the image class as %+v", p)
	}

	var usb storageClass
	if !r.named(t, "StorageClass", "csi-fat-usb", &usb) {
		t.Fatal("no USB StorageClass")
	}
	if usb.VolumeBindingMode != "WaitForFirstConsumer" || usb.AllowVolumeExpansion == nil || *usb.AllowVolumeExpansion {
		t.Errorf("USB class binding %q expansion %v", usb.VolumeBindingMode, usb.AllowVolumeExpansion)
	}
	q, err := node.ParseParams(usb.Parameters)
	if err != nil {
		t.Fatalf("driver rejects the USB class's parameters %v: %v", usb.Parameters, err)
	}
	if q.Pool != node.PoolUSB || !q.Adopt || q.Reclaim != node.ReclaimWipe || q.Mode != node.ModeFlush {
		t.Errorf("driver reads the USB class as %+v", q)
	}
}

func TestStorageClassesCanBeLeftOut(t *testing.T) {
	r := render(t, "--set", "usb.enabled=true", "--set", "storageClasses.image.create=false", "--set", "storageClasses.usb.create=false")
	if n := len(r.all("StorageClass")); n != 0 {
		t.Errorf("%d StorageClasses rendered with create=false", n)
	}
}
