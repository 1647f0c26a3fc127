package chart

import (
	"strings"
	"testing"
)

// TestSchemaRejectsBadValues: each bad value makes helm template fail with the schema naming
// the offending place, while the same key with a good value renders.
func TestSchemaRejectsBadValues(t *testing.T) {
	for _, c := range []struct {
		name      string
		bad, good []string
		mention   string
	}{
		{"misspelt top-level key", []string{"--set", "kubletDir=/x"}, []string{"--set", "kubeletDir=/x"}, "kubletDir"},
		{"misspelt nested key", []string{"--set", "usb.enabeld=true"}, []string{"--set", "usb.enabled=true"}, "enabeld"},
		{"registration mode", []string{"--set", "registration.mode=both"}, []string{"--set", "registration.mode=builtin"}, "/registration/mode"},
		{"pull policy", []string{"--set", "image.pullPolicy=Sometimes"}, []string{"--set", "image.pullPolicy=Never"}, "/image/pullPolicy"},
		{"relative kubelet dir", []string{"--set", "kubeletDir=var/lib/kubelet"}, []string{"--set", "kubeletDir=/var/lib/kubelet"}, "/kubeletDir"},
		{"unknown class parameter", []string{"--set", "storageClasses.image.parameters.fstype=vfat"}, []string{"--set", "storageClasses.image.parameters.fatType=16"}, "fstype"},
		{"USB-only parameter on the image class", []string{"--set", "storageClasses.image.parameters.reclaim=wipe"}, []string{"--set", "usb.enabled=true", "--set", "storageClasses.usb.parameters.reclaim=wipe"}, "reclaim"},
		{"FAT type", []string{"--set", "storageClasses.image.parameters.fatType=64"}, []string{"--set", "storageClasses.image.parameters.fatType=auto"}, "fatType"},
		{"write mode", []string{"--set", "storageClasses.image.parameters.mode=async"}, []string{"--set", "storageClasses.image.parameters.mode=flush"}, "mode"},
		{"label too long", []string{"--set", "storageClasses.image.parameters.label=TWELVE_CHARS"}, []string{"--set", "storageClasses.image.parameters.label=ELEVENCHARS"}, "label"},
		{"log level type", []string{"--set", "logLevel=high"}, []string{"--set", "logLevel=4"}, "/logLevel"},
		{"port range", []string{"--set", "driver.healthPort=70000"}, []string{"--set", "driver.healthPort=9808"}, "healthPort"},
		{"reserve size", []string{"--set", "driver.reserve=1GB"}, []string{"--set", "driver.reserve=512M"}, "reserve"},
		{"duration", []string{"--set", "provisioner.timeout=60"}, []string{"--set", "provisioner.timeout=2m"}, "timeout"},
		{"inline volumes switch", []string{"--set", "inlineVolumes.enabled=sometimes"}, []string{"--set", "inlineVolumes.enabled=false"}, "/inlineVolumes/enabled"},
		{"resizer switch", []string{"--set", "resizer.enabled=maybe"}, []string{"--set", "resizer.enabled=false"}, "/resizer/enabled"},
		{"misspelt sidecar key", []string{"--set", "snapshotter.timout=2m"}, []string{"--set", "snapshotter.timeout=2m"}, "timout"},
		{"snapshotter timeout", []string{"--set", "snapshotter.timeout=60"}, []string{"--set", "snapshotter.timeout=90s"}, "timeout"},
		{"sidecar image without tag", []string{"--set", "resizer.image.tag="}, []string{"--set", "resizer.image.tag=v2.3.0"}, "tag"},
		{"snapshot deletion policy", []string{"--set", "volumeSnapshotClass.deletionPolicy=Keep"}, []string{"--set", "volumeSnapshotClass.deletionPolicy=Retain"}, "deletionPolicy"},
		{"snapshot class name", []string{"--set", "volumeSnapshotClass.name=Fat_Snaps"}, []string{"--set", "volumeSnapshotClass.name=fat-snaps"}, "/volumeSnapshotClass/name"},
		{"snapshot class parameters are strings", []string{"--set-json", `volumeSnapshotClass.parameters={"n":1}`}, []string{"--set-json", `volumeSnapshotClass.parameters={"n":"1"}`}, "parameters"},
		{"expansion switch", []string{"--set", "storageClasses.image.allowVolumeExpansion=yes"}, []string{"--set", "storageClasses.image.allowVolumeExpansion=false"}, "allowVolumeExpansion"},
		{"expansion on the USB class", []string{"--set", "storageClasses.usb.allowVolumeExpansion=true"}, []string{"--set", "storageClasses.image.allowVolumeExpansion=true"}, "allowVolumeExpansion"},
		{"maximum size", []string{"--set", "storageClasses.image.parameters.maxSize=1GB"}, []string{"--set", "storageClasses.image.parameters.maxSize=1Gi"}, "maxSize"},
		{"code page", []string{"--set", "storageClasses.image.parameters.codepage=1252"}, []string{"--set", "storageClasses.image.parameters.codepage=850"}, "codepage"},
		{"damage policy", []string{"--set", "storageClasses.image.parameters.onDamage=ignore"}, []string{"--set", "storageClasses.image.parameters.onDamage=fail"}, "onDamage"},
		{"stick layout", []string{"--set", "storageClasses.usb.parameters.layout=gpt"}, []string{"--set", "usb.enabled=true", "--set", "storageClasses.usb.parameters.layout=mbr"}, "layout"},
		{"USB-only layout on the image class", []string{"--set", "storageClasses.image.parameters.layout=mbr"}, []string{"--set", "usb.enabled=true", "--set", "storageClasses.usb.parameters.wipe=true"}, "layout"},
		{"deny list of strings", []string{"--set", "usb.deny.vendor=Acme"}, []string{"--set-json", `usb.deny.vendor=["Acme"]`}, "/usb/deny/vendor"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := templateFails(t, c.bad...)
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error does not mention %q: %v", c.mention, err)
			}
			render(t, c.good...)
		})
	}
}
