package discovery

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/volume"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

const testDriver = "fat.csi-fat.io"

func TestDiscoveredName(t *testing.T) {
	long := strings.Repeat("worker.example.", 16) + "com" // 243 bytes
	for _, c := range []struct{ node, medium string }{
		{"worker-1", "usb-SanDisk_Cruzer_4C530001-0:0"},
		{"Worker_1.Example.COM", "mmc-SD16G_0x1234abcd"},
		{long, "usb-Generic_Flash_Disk_ABC-0:0"},
		{"-", "x"},
	} {
		name := VolumeName(c.node, c.medium)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("%q %q: name %q is not a PV name: %v", c.node, c.medium, name, errs)
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("%q %q: name %q is not a DNS label: %v", c.node, c.medium, name, errs)
		}
		if err := volume.ValidateName(name); err != nil {
			t.Errorf("%q %q: name %q is not a volume name: %v", c.node, c.medium, name, err)
		}
		if len(name) > 51 {
			t.Errorf("name %q is %d bytes", name, len(name))
		}
		if again := VolumeName(c.node, c.medium); again != name {
			t.Errorf("name not stable: %q then %q", name, again)
		}
	}
	a := VolumeName("worker-1", "usb-A-0:0")
	if b := VolumeName("worker-2", "usb-A-0:0"); a == b {
		t.Errorf("two nodes, one name %q", a)
	}
	if b := VolumeName("worker-1", "usb-B-0:0"); a == b {
		t.Errorf("two media, one name %q", a)
	}
	if !strings.HasPrefix(a, "fat-worker-1-") {
		t.Errorf("name %q does not show its node", a)
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"SanDisk":                      "SanDisk",
		"Mass Storage Device ":         "Mass_Storage_Device",
		" _weird: serial/#1_ ":         "weird__serial__1",
		"CAM01":                        "CAM01",
		"":                             "",
		"***":                          "",
		strings.Repeat("a", 70):        strings.Repeat("a", 63),
		strings.Repeat("b", 62) + "-c": strings.Repeat("b", 62),
		"Ünïcode":                      "n_code",
	} {
		got := labelValue(in)
		if got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("labelValue(%q) = %q: not a label value: %v", in, got, errs)
		}
	}
}

func testMedium() media.Status {
	return media.Status{ID: "usb-Kingston_DataTraveler_3.0_ABC123-0:0", Kernel: "sdb", Size: 8 << 30,
		Vendor: "Kingston", Model: "DataTraveler 3.0", Serial: "ABC123", State: media.StateFAT}
}

func testDiscoveryConfig(t *testing.T) *Config {
	t.Helper()
	c := &Config{DriverName: testDriver, StorageClass: "csi-fat-discovered", ReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
		Interval: time.Second, MountOptions: []string{"uid=1000"}, Parameters: map[string]string{"mode": "flush", "layout": "mbr", "label": "cam"}}
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDiscoveryPrepare(t *testing.T) {
	c := testDiscoveryConfig(t)
	if !c.adopt.Adopt || c.adopt.Pool != volume.PoolUSB || c.adopt.Reclaim != volume.ReclaimKeep || c.adopt.Mode != volume.ModeFlush || c.adopt.Layout != "" || c.adopt.Label != "" {
		t.Errorf("adopt params %+v: want adopt, pool usb, reclaim keep, mode flush, no format parameters", c.adopt)
	}
	if c.format.Adopt || c.format.Layout != "mbr" || c.format.Label != "CAM" || c.format.Mode != volume.ModeFlush || c.format.Reclaim != volume.ReclaimKeep {
		t.Errorf("format params %+v: want layout mbr, label CAM, mode flush, reclaim keep", c.format)
	}
	for _, bad := range []Config{
		{DriverName: testDriver, ReclaimPolicy: "Recycle", Interval: time.Second},
		{DriverName: testDriver, ReclaimPolicy: corev1.PersistentVolumeReclaimDelete},
		{DriverName: "Fat.Example", ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, Interval: time.Second},
		{DriverName: testDriver, ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, Interval: time.Second, Parameters: map[string]string{"reclaim": "wipe"}},
		{DriverName: testDriver, ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, Interval: time.Second, Parameters: map[string]string{"adopt": "false"}},
		{DriverName: testDriver, ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, Interval: time.Second, Parameters: map[string]string{"serial": "[X"}},
		{DriverName: testDriver, ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, Interval: time.Second, Parameters: map[string]string{"mode": "fast"}},
		{DriverName: testDriver, ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, Interval: time.Second, Parameters: map[string]string{"colour": "red"}},
	} {
		if err := bad.Prepare(); err == nil {
			t.Errorf("%+v: prepared", bad)
		}
	}
}

// TestDiscoverySelects: vendor, model, serial, byId and byPath patterns choose the media
// published; with fsLabel no blank medium is (it has no label to match).
func TestDiscoverySelects(t *testing.T) {
	m := testMedium()
	m.ByPath = []string{"pci-0000:00:14.0-usb-0:2:1.0-scsi-0:0:0:0"}
	blank := m
	blank.State = media.StateBlank
	for _, c := range []struct {
		params      map[string]string
		fat, blanks bool
	}{
		{nil, true, true},
		{map[string]string{"serial": "ABC*"}, true, true},
		{map[string]string{"serial": "XYZ*"}, false, false},
		{map[string]string{"vendor": "Kingston", "model": "DataTraveler*"}, true, true},
		{map[string]string{"model": "Cruzer"}, false, false},
		{map[string]string{"byPath": "*-usb-0:2:*"}, true, true},
		{map[string]string{"byPath": "*-usb-0:3:*"}, false, false},
		{map[string]string{"byId": "usb-Kingston_*"}, true, true},
		{map[string]string{"fsLabel": "CAM*"}, true, false},
	} {
		cfg := &Config{DriverName: testDriver, ReclaimPolicy: corev1.PersistentVolumeReclaimDelete, Interval: time.Second, Parameters: c.params}
		if err := cfg.Prepare(); err != nil {
			t.Fatalf("%v: %v", c.params, err)
		}
		if got := cfg.selects(m); got != c.fat {
			t.Errorf("%v: selects the FAT medium %t, want %t", c.params, got, c.fat)
		}
		if got := cfg.selects(blank); got != c.blanks {
			t.Errorf("%v: selects the blank medium %t, want %t", c.params, got, c.blanks)
		}
		acts := planDiscovery(testDriver, "worker-1", []media.Status{m}, nil, nil, true, cfg.selects)
		if (len(acts) == 1) != c.fat {
			t.Errorf("%v: actions %q", c.params, kinds(acts))
		}
	}
}

func TestDiscoveredPV(t *testing.T) {
	c := testDiscoveryConfig(t)
	m := testMedium()
	name := VolumeName("worker-1", m.ID)
	rec := volume.Record{ID: volume.ID{Pool: volume.PoolUSB, Node: "worker-1", Name: name}.String(), Name: name, Size: m.Size, Params: c.adopt, Device: m.ID}
	pv := c.discoveredPV("worker-1", testDriver+"/node", rec, m, "CAM01")
	if pv.Name != name {
		t.Errorf("PV %q, want %q", pv.Name, name)
	}
	want := map[string]string{
		"app.kubernetes.io/managed-by": DiscoveryManagedBy,
		testDriver + "/node":           "worker-1",
		testDriver + "/serial":         "ABC123",
		testDriver + "/vendor":         "Kingston",
		testDriver + "/model":          "DataTraveler_3.0",
		testDriver + "/fs-label":       "CAM01",
		testDriver + "/size":           "8589934592",
		testDriver + "/present":        "true",
	}
	if !mapsEqual(pv.Labels, want) {
		t.Errorf("labels %v, want %v", pv.Labels, want)
	}
	for k, v := range pv.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("label key %q: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("label %s=%q: %v", k, v, errs)
		}
	}
	sel, err := labels.Parse(discoverySelector(testDriver, "worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(pv.Labels)) {
		t.Errorf("selector %s does not select the PV", sel)
	}
	if other, _ := labels.Parse(discoverySelector(testDriver, "worker-2")); other.Matches(labels.Set(pv.Labels)) {
		t.Errorf("worker-2's selector selects worker-1's PV")
	}
	if pv.Annotations["pv.kubernetes.io/provisioned-by"] != testDriver || pv.Annotations[testDriver+"/medium"] != m.ID {
		t.Errorf("annotations %v", pv.Annotations)
	}
	sp := pv.Spec
	if sp.CSI == nil || sp.CSI.Driver != testDriver || sp.CSI.VolumeHandle != rec.ID || sp.CSI.VolumeAttributes["adopt"] != "true" {
		t.Errorf("csi source %+v", sp.CSI)
	}
	if q := sp.Capacity[corev1.ResourceStorage]; q.Value() != m.Size {
		t.Errorf("capacity %v, want %d", q.String(), m.Size)
	}
	if !slices.Equal(sp.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) || sp.StorageClassName != "csi-fat-discovered" ||
		sp.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || !slices.Equal(sp.MountOptions, []string{"uid=1000"}) {
		t.Errorf("spec %+v", sp)
	}
	terms := sp.NodeAffinity.Required.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || terms[0].MatchExpressions[0].Key != testDriver+"/node" ||
		!slices.Equal(terms[0].MatchExpressions[0].Values, []string{"worker-1"}) {
		t.Errorf("node affinity %+v", terms)
	}
	// A medium without serial or label: those labels are left out rather than empty.
	m.Serial, m.Vendor = "", "  "
	pv = c.discoveredPV("worker-1", testDriver+"/node", rec, m, "")
	for _, k := range []string{"/serial", "/vendor", "/fs-label"} {
		if v, ok := pv.Labels[testDriver+k]; ok {
			t.Errorf("label %s=%q for an empty value", k, v)
		}
	}
}

func TestMarkPatch(t *testing.T) {
	c := testDiscoveryConfig(t)
	now := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	var p struct {
		Metadata struct {
			Labels      map[string]string  `json:"labels"`
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(c.markPatch(true, now), &p); err != nil {
		t.Fatal(err)
	}
	if p.Metadata.Labels[testDriver+"/present"] != "false" || p.Metadata.Annotations[testDriver+"/gone-since"] == nil ||
		*p.Metadata.Annotations[testDriver+"/gone-since"] != "2026-12-06T07:00:00Z" {
		t.Errorf("mark patch %s", c.markPatch(true, now))
	}
	p.Metadata.Labels, p.Metadata.Annotations = nil, nil
	if err := json.Unmarshal(c.markPatch(false, now), &p); err != nil {
		t.Fatal(err)
	}
	ann, ok := p.Metadata.Annotations[testDriver+"/gone-since"]
	if p.Metadata.Labels[testDriver+"/present"] != "true" || !ok || ann != nil {
		t.Errorf("unmark patch %s: want present=true and the annotation removed (null)", c.markPatch(false, now))
	}
}

// discoveredPVOf is the PV as the API server would list it, bound to a claim or not.
func discoveredPVOf(t *testing.T, node string, m media.Status, bound, marked bool) corev1.PersistentVolume {
	c := testDiscoveryConfig(t)
	name := VolumeName(node, m.ID)
	rec := volume.Record{ID: volume.ID{Pool: volume.PoolUSB, Node: node, Name: name}.String(), Name: name, Size: m.Size, Params: c.adopt, Device: m.ID}
	pv := c.discoveredPV(node, testDriver+"/node", rec, m, "")
	if bound {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "cam", Name: "photos"}
	}
	if marked {
		pv.Labels[testDriver+"/present"] = "false"
	}
	return *pv
}

func discoveredRecord(node string, m media.Status) volume.Record {
	name := VolumeName(node, m.ID)
	return volume.Record{ID: volume.ID{Pool: volume.PoolUSB, Node: node, Name: name}.String(), Name: name, Size: m.Size, Device: m.ID}
}

func kinds(actions []discoveryAction) []string {
	var out []string
	for _, a := range actions {
		out = append(out, a.Kind+" "+a.Name)
	}
	return out
}

func TestPlanDiscovery(t *testing.T) {
	const node = "worker-1"
	fat := testMedium()
	blank := media.Status{ID: "usb-Generic_Blank_B1-0:0", Size: 1 << 30, State: media.StateBlank}
	foreign := media.Status{ID: "usb-Generic_Ext4_E1-0:0", Size: 1 << 30, State: media.StateForeign}
	busy := media.Status{ID: "usb-Generic_Busy_U1-0:0", Size: 1 << 30, State: media.StateBusy}
	claimed := fat
	claimed.State, claimed.Volume = media.StateClaimed, discoveredRecord(node, fat).ID
	otherClaim := media.Status{ID: "usb-Other_Claim_C1-0:0", Size: 1 << 30, State: media.StateClaimed, Volume: "usb:" + node + ":pvc-1"}
	excluded := media.Status{ID: "usb-Fixed_Disk_F1-0:0", State: media.StateExcluded}
	fatName, blankName := VolumeName(node, fat.ID), VolumeName(node, blank.ID)
	rec := discoveredRecord(node, fat)
	otherNodePV := discoveredPVOf(t, "worker-2", fat, false, false) // worker-2's loop would own it

	for _, c := range []struct {
		name    string
		media   []media.Status
		volumes []volume.Record
		pvs     []corev1.PersistentVolume
		blank   bool
		want    []string
	}{
		{name: "a FAT medium plugged in is published; others are not",
			media: []media.Status{fat, blank, foreign, busy, otherClaim, excluded},
			want:  []string{"create " + fatName}},
		{name: "blank media too when asked",
			media: []media.Status{fat, blank, foreign}, blank: true,
			want: []string{"create " + blankName, "create " + fatName}},
		{name: "an unbound PV whose volume is gone goes; the medium is published again next round",
			media: []media.Status{fat}, pvs: []corev1.PersistentVolume{discoveredPVOf(t, node, fat, false, false)},
			want: []string{"remove " + fatName}},
		{name: "published and present: nothing to do",
			media: []media.Status{claimed}, volumes: []volume.Record{rec}, pvs: []corev1.PersistentVolume{discoveredPVOf(t, node, fat, false, false)}},
		{name: "bound and present: nothing to do",
			media: []media.Status{claimed}, volumes: []volume.Record{rec}, pvs: []corev1.PersistentVolume{discoveredPVOf(t, node, fat, true, false)}},
		{name: "a volume without its PV gets it",
			media: []media.Status{claimed}, volumes: []volume.Record{rec},
			want: []string{"publish " + fatName}},
		{name: "released, volume deleted, PV not yet: wait for the provisioner",
			media: []media.Status{fat}, pvs: []corev1.PersistentVolume{discoveredPVOf(t, node, fat, true, false)}},
		{name: "pulled out and unbound: PV and volume go",
			volumes: []volume.Record{rec}, pvs: []corev1.PersistentVolume{discoveredPVOf(t, node, fat, false, false)},
			want: []string{"remove " + fatName}},
		{name: "pulled out and bound: marked",
			volumes: []volume.Record{rec}, pvs: []corev1.PersistentVolume{discoveredPVOf(t, node, fat, true, false)},
			want: []string{"mark " + fatName}},
		{name: "pulled out, bound and marked: nothing more",
			volumes: []volume.Record{rec}, pvs: []corev1.PersistentVolume{discoveredPVOf(t, node, fat, true, true)}},
		{name: "plugged in again while bound: mark cleared",
			media: []media.Status{claimed}, volumes: []volume.Record{rec}, pvs: []corev1.PersistentVolume{discoveredPVOf(t, node, fat, true, true)},
			want: []string{"unmark " + fatName}},
		{name: "a pulled medium's volume without PV is forgotten",
			volumes: []volume.Record{rec},
			want:    []string{"forget " + fatName}},
		{name: "another node's PV is never touched, even with its medium absent here",
			pvs: []corev1.PersistentVolume{otherNodePV}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := kinds(planDiscovery(testDriver, node, c.media, c.volumes, c.pvs, c.blank, nil))
			if !slices.Equal(got, c.want) {
				t.Errorf("actions %q, want %q", got, c.want)
			}
		})
	}

	// A partitioned stick: one volume per free FAT partition, each named apart; a claimed one
	// is left alone, and a whole one with a PV of its own is published and left.
	twin := media.Status{ID: "usb-Twin_Card_T1-0:0", Size: 64 << 20, State: media.StateFAT, Content: "partition",
		Partitions: []media.PartitionStatus{{Number: 1, State: media.StateFAT, Size: 15 << 20}, {Number: 3, State: media.StateFAT, Size: 46 << 20}}}
	got := kinds(planDiscovery(testDriver, node, []media.Status{twin}, nil, nil, false, nil))
	want := []string{"create " + VolumeName(node, twin.ID+"#1"), "create " + VolumeName(node, twin.ID+"#3")}
	if !slices.Equal(got, want) {
		t.Errorf("partitioned stick: actions %q, want %q", got, want)
	}
	twin.State, twin.Partitions[0].State, twin.Partitions[0].Volume = media.StateClaimed, media.StateClaimed, "usb:"+node+":pvc-9"
	gpt := media.Status{ID: "usb-Gpt_Card_G1-0:0", Size: 64 << 20, State: media.StateFAT, Content: "partition",
		Partitions: []media.PartitionStatus{{Number: 2, GUID: "3F2504E0-4F89-41D3-9A0C-0305E82C3301", State: media.StateFAT}}}
	got = kinds(planDiscovery(testDriver, node, []media.Status{twin, gpt}, nil, nil, false, nil))
	want = []string{"create " + VolumeName(node, gpt.ID+"#3F2504E0-4F89-41D3-9A0C-0305E82C3301"), "create " + VolumeName(node, twin.ID+"#3")}
	if !slices.Equal(got, want) {
		t.Errorf("a partition claimed, a GPT one by GUID: actions %q, want %q", got, want)
	}
	acts := planDiscovery(testDriver, node, []media.Status{gpt}, nil, nil, false, nil)
	if len(acts) != 1 || acts[0].Partition != "3F2504E0-4F89-41D3-9A0C-0305E82C3301" {
		t.Errorf("GPT partition action %+v: want the partition by its GUID", acts)
	}
	// A partition's PV, pulled out unbound, is removed like a whole one's.
	prec := discoveredRecord(node, twin)
	prec.Partition, prec.Name = "3", VolumeName(node, twin.ID+"#3")
	prec.ID = volume.ID{Pool: volume.PoolUSB, Node: node, Name: prec.Name}.String()
	ppv := testDiscoveryConfig(t).discoveredPV(node, testDriver+"/node", prec, twin, "TWO")
	if ppv.Annotations[testDriver+"/partition"] != "3" || ppv.Labels[testDriver+"/partition"] != "3" {
		t.Errorf("partition PV: annotations %v, labels %v", ppv.Annotations, ppv.Labels)
	}
	got = kinds(planDiscovery(testDriver, node, nil, []volume.Record{prec}, []corev1.PersistentVolume{*ppv}, false, nil))
	if want := []string{"remove " + prec.Name}; !slices.Equal(got, want) {
		t.Errorf("pulled partitioned stick: actions %q, want %q", got, want)
	}

	// A remove names the volume to delete after the PV, and the PV as listed (its UID and
	// resource version are the delete's preconditions).
	pv := discoveredPVOf(t, node, fat, false, false)
	pv.UID, pv.ResourceVersion = "u-1", "42"
	acts = planDiscovery(testDriver, node, nil, []volume.Record{rec}, []corev1.PersistentVolume{pv}, false, nil)
	if len(acts) != 1 || acts[0].Volume == nil || acts[0].Volume.ID != rec.ID || acts[0].PV.UID != "u-1" || acts[0].PV.ResourceVersion != "42" {
		t.Errorf("remove action %+v", acts)
	}
	// A PV whose handle names another node, though labelled and named like ours, is left alone.
	forged := discoveredPVOf(t, node, fat, false, false)
	forged.Spec.CSI.VolumeHandle = "usb:worker-2:" + fatName
	if acts := planDiscovery(testDriver, node, nil, nil, []corev1.PersistentVolume{forged}, false, nil); len(acts) != 0 {
		t.Errorf("actions on a PV of another node: %q", kinds(acts))
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
