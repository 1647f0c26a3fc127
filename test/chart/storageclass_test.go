package chart

import (
	"maps"
	"slices"
	"testing"

	"github.com/csi-fat/csi-fat/node/volume"
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
	// Claims grow through the csi-resizer, on by default.
	if sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
		t.Errorf("allowVolumeExpansion %v, want true", sc.AllowVolumeExpansion)
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
	p, err := volume.ParseParams(sc.Parameters)
	if err != nil || p.Pool != volume.PoolImage {
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
		"--set-json", `storageClasses.image.parameters={"fatType":32,"clusterSize":"4K","label":"photos","fats":1,"mode":"sync","maxSize":"4Gi","onDamage":"readonly","codepage":850}`,
		"--set-json", `storageClasses.image.mountOptions=["noatime","shortname=mixed"]`,
		"--set-json", `storageClasses.usb.parameters={"adopt":true,"reclaim":"wipe","mode":"flush","codepage":"852","vendor":"SanDisk","model":"Cam*","serial":"*0042","byId":"usb-SanDisk_*","byPath":"*-usb-0:2:*","fsLabel":"CAM01","partition":2}`,
	)

	var img storageClass
	if !r.named(t, "StorageClass", "fat32", &img) {
		t.Fatal("no StorageClass fat32")
	}
	want := map[string]string{"pool": "image", "fatType": "32", "clusterSize": "4K", "label": "photos", "fats": "1", "mode": "sync",
		"maxSize": "4Gi", "onDamage": "readonly", "codepage": "850"}
	if !maps.Equal(img.Parameters, want) {
		t.Errorf("image class parameters %v, want %v", img.Parameters, want)
	}
	if img.Metadata.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("isDefault not annotated: %v", img.Metadata.Annotations)
	}
	if img.ReclaimPolicy != "Retain" || !slices.Equal(img.MountOptions, []string{"noatime", "shortname=mixed"}) {
		t.Errorf("reclaimPolicy %q mountOptions %v", img.ReclaimPolicy, img.MountOptions)
	}
	p, err := volume.ParseParams(img.Parameters)
	if err != nil {
		t.Fatalf("driver rejects the image class's parameters %v: %v", img.Parameters, err)
	}
	if p.FATType != 32 || p.ClusterSize != 4096 || p.Label != "PHOTOS" || p.FATs != 1 || p.Mode != volume.ModeSync ||
		p.MaxSize != 4<<30 || p.OnDamage != volume.OnDamageReadOnly || p.CodePage != 850 {
		t.Errorf("driver reads the image class as %+v", p)
	}

	var usb storageClass
	if !r.named(t, "StorageClass", "csi-fat-usb", &usb) {
		t.Fatal("no USB StorageClass")
	}
	if usb.VolumeBindingMode != "WaitForFirstConsumer" || usb.AllowVolumeExpansion == nil || *usb.AllowVolumeExpansion {
		t.Errorf("USB class binding %q expansion %v", usb.VolumeBindingMode, usb.AllowVolumeExpansion)
	}
	q, err := volume.ParseParams(usb.Parameters)
	if err != nil {
		t.Fatalf("driver rejects the USB class's parameters %v: %v", usb.Parameters, err)
	}
	if q.Pool != volume.PoolUSB || !q.Adopt || q.Reclaim != volume.ReclaimWipe || q.Mode != volume.ModeFlush || q.CodePage != 852 {
		t.Errorf("driver reads the USB class as %+v", q)
	}
	if got := q.Map(); got["vendor"] != "SanDisk" || got["model"] != "Cam*" || got["serial"] != "*0042" || got["fsLabel"] != "CAM01" ||
		got["byId"] != "usb-SanDisk_*" || got["byPath"] != "*-usb-0:2:*" || got["partition"] != "2" {
		t.Errorf("driver reads the USB class's stick selection as %v", got)
	}

	// A new stick's layout and wipe go without adopt.
	r = render(t, "--set", "usb.enabled=true",
		"--set-json", `storageClasses.usb.parameters={"layout":"mbr","wipe":true}`)
	var fresh storageClass
	if !r.named(t, "StorageClass", "csi-fat-usb", &fresh) {
		t.Fatal("no USB StorageClass")
	}
	if q, err = volume.ParseParams(fresh.Parameters); err != nil || q.Layout != "mbr" || !q.Wipe {
		t.Errorf("driver reads the USB class %v as %+v, %v", fresh.Parameters, q, err)
	}
}

func TestStorageClassesCanBeLeftOut(t *testing.T) {
	r := render(t, "--set", "usb.enabled=true", "--set", "storageClasses.image.create=false", "--set", "storageClasses.usb.create=false")
	if n := len(r.all("StorageClass")); n != 0 {
		t.Errorf("%d StorageClasses rendered with create=false", n)
	}
}

// TestStorageClassExpansion: the image class allows growth only while the resizer runs and the
// class's own switch is on; the USB class never does (a stick cannot grow).
func TestStorageClassExpansion(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  bool
	}{
		{nil, true},
		{[]string{"--set", "resizer.enabled=false"}, false},
		{[]string{"--set", "storageClasses.image.allowVolumeExpansion=false"}, false},
	} {
		r := render(t, append(c.flags, "--set", "usb.enabled=true")...)
		var img, usb storageClass
		if !r.named(t, "StorageClass", "csi-fat", &img) || !r.named(t, "StorageClass", "csi-fat-usb", &usb) {
			t.Fatalf("%v: want both StorageClasses", c.flags)
		}
		if img.AllowVolumeExpansion == nil || *img.AllowVolumeExpansion != c.want {
			t.Errorf("%v: image class allowVolumeExpansion %v, want %v", c.flags, img.AllowVolumeExpansion, c.want)
		}
		if usb.AllowVolumeExpansion == nil || *usb.AllowVolumeExpansion {
			t.Errorf("%v: USB class allowVolumeExpansion %v, want false", c.flags, usb.AllowVolumeExpansion)
		}
	}
}
