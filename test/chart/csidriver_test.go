package chart

import (
	"slices"
	"testing"
)

func TestCSIDriverSpec(t *testing.T) {
	var d csiDriver
	obj := render(t).get(t, "CSIDriver", &d)
	if obj.Name != "fat.csi-fat.io" {
		t.Errorf("CSIDriver name %q, want fat.csi-fat.io", obj.Name)
	}
	s := d.Spec
	for _, c := range []struct {
		field string
		got   *bool
		want  bool
	}{
		{"attachRequired", s.AttachRequired, false},  // no ControllerPublish
		{"podInfoOnMount", s.PodInfoOnMount, true},   // inline volumes need it: the ephemeral flag comes with the pod info
		{"storageCapacity", s.StorageCapacity, true}, // the provisioners publish capacity
	} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("spec.%s = %v, want %v set explicitly", c.field, c.got, c.want)
		}
	}
	// The driver applies fsGroup itself (VOLUME_MOUNT_GROUP, gid= on the mount), on every
	// volume whatever its fsType.
	if s.FSGroupPolicy != "File" {
		t.Errorf("fsGroupPolicy %q, want File", s.FSGroupPolicy)
	}
	// The driver serves inline volumes (NodePublishVolume with the ephemeral context).
	if !slices.Equal(s.VolumeLifecycleModes, []string{"Persistent", "Ephemeral"}) {
		t.Errorf("volumeLifecycleModes %v, want [Persistent Ephemeral]", s.VolumeLifecycleModes)
	}
}

// TestInlineVolumesOff: inlineVolumes.enabled=false leaves Persistent volumes only, so the
// kubelet refuses inline volumes of the driver.
func TestInlineVolumesOff(t *testing.T) {
	var d csiDriver
	render(t, "--set", "inlineVolumes.enabled=false").get(t, "CSIDriver", &d)
	if !slices.Equal(d.Spec.VolumeLifecycleModes, []string{"Persistent"}) {
		t.Errorf("volumeLifecycleModes %v with inlineVolumes.enabled=false, want [Persistent]", d.Spec.VolumeLifecycleModes)
	}
}

func TestDriverNameReachesEveryUse(t *testing.T) {
	const name = "fat.example.org"
	r := render(t, "--set", "driverName="+name)
	if len(r.all("CSIDriver")) != 1 || r.all("CSIDriver")[0].Name != name {
		t.Errorf("CSIDriver not named %s", name)
	}
	pod := r.nodePlugin(t)
	driver := pod.container(t, "csi-fat")
	if got := driver.flag(t, "driver-name"); got != name {
		t.Errorf("--driver-name=%q, want %q", got, name)
	}
	if hp, _ := pod.hostPathOf(driver, "/csi"); hp != "/var/lib/kubelet/plugins/"+name {
		t.Errorf("/csi is host %q, want the plugin directory of %s", hp, name)
	}
	var sc storageClass
	if !r.named(t, "StorageClass", "csi-fat", &sc) || sc.Provisioner != name {
		t.Errorf("StorageClass csi-fat provisioner %q, want %q", sc.Provisioner, name)
	}
}
