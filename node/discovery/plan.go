package discovery

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/volume"
)

// What one round of discovery mode does, decided from what the node sees (its media, its
// volume records) and what the API server holds (the PVs the node's loop made), without doing it:
// the decisions are tested on their own; discoveryloop.go carries them out.

// Kinds of discovery actions.
const (
	// discoverCreate makes the volume of a free usable medium (adopting its file system, or
	// formatting a blank one) and publishes its PV.
	discoverCreate = "create"
	// discoverPublish makes the PV of a discovered volume that has none (the PV was deleted by
	// hand, or the plugin stopped between the two steps of a create).
	discoverPublish = "publish"
	// discoverRemove deletes a PV no claim is bound to, then its volume: its medium was pulled
	// out, or its volume does not exist (the node's state was lost; the medium, still there, is
	// published again next round).
	discoverRemove = "remove"
	// discoverForget deletes the volume of a pulled medium that has no PV any more.
	discoverForget = "forget"
	// discoverMark marks the PV of a pulled medium that a claim is bound to: its pod may come
	// back to it when the medium is plugged in again.
	discoverMark = "mark"
	// discoverUnmark clears the mark of a PV whose medium is back.
	discoverUnmark = "unmark"
)

// discoveryAction is one thing to do: on a medium (create, publish), a PV (remove, mark,
// unmark) or a volume (forget, and remove's volume when there is one).
type discoveryAction struct {
	Kind      string
	Name      string // the volume's and PV's name
	Medium    media.Status
	Partition string // create: the partition to adopt, "" for the medium whole
	Why       string // remove: why
	PV        *corev1.PersistentVolume
	Volume    *volume.Record
}

// planDiscovery decides one round. seen is what the pool's scan sees now; volumes are the
// node's discovered volumes (those whose name is VolumeName of their device); pvs are the PVs
// of this node's loop, as listed. blank says whether blank media are published too (formatted),
// selects which media may be (nil: all).
// A PV's medium is identified by its annotation, so a PV whose medium is pulled out is still
// known for what it was.
func planDiscovery(driverName, nodeID string, seen []media.Status, volumes []volume.Record, pvs []corev1.PersistentVolume, blank bool, selects func(media.Status) bool) []discoveryAction {
	present := map[string]media.Status{}
	for _, m := range seen {
		if m.ID != "" && m.State != media.StateExcluded {
			present[m.ID] = m
		}
	}
	vols := map[string]*volume.Record{}
	for i := range volumes {
		vols[volumes[i].Name] = &volumes[i]
	}
	pvNames := map[string]bool{}
	var out []discoveryAction
	for i := range pvs {
		pv := &pvs[i]
		pvNames[pv.Name] = true
		id := pv.Annotations[driverName+annSuffixMedium]
		key := UnitKey(id, pv.Annotations[driverName+annSuffixPartition])
		if id == "" || VolumeName(nodeID, key) != pv.Name || !handleOnNode(pv, nodeID) {
			continue // not one this node's loop made: never touched
		}
		_, here := present[id]
		marked := pv.Labels[driverName+labelSuffixPresent] == "false"
		switch {
		case !here && pv.Spec.ClaimRef == nil:
			out = append(out, discoveryAction{Kind: discoverRemove, Name: pv.Name, PV: pv, Volume: vols[pv.Name], Why: "medium pulled out"})
		case pv.Spec.ClaimRef == nil && vols[pv.Name] == nil:
			out = append(out, discoveryAction{Kind: discoverRemove, Name: pv.Name, PV: pv, Why: "its volume does not exist"})
		case !here && !marked:
			out = append(out, discoveryAction{Kind: discoverMark, Name: pv.Name, PV: pv})
		case here && marked:
			out = append(out, discoveryAction{Kind: discoverUnmark, Name: pv.Name, PV: pv})
		}
	}
	for _, v := range volumes {
		if _, here := present[v.Device]; !here && !pvNames[v.Name] {
			out = append(out, discoveryAction{Kind: discoverForget, Name: v.Name, Volume: vols[v.Name]})
		}
	}
	ids := make([]string, 0, len(present))
	for id := range present {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, v := range volumes {
		// Published; or released and about to be deleted by the provisioner, after which the
		// medium is published again.
		if _, here := present[v.Device]; here && !pvNames[v.Name] {
			out = append(out, discoveryAction{Kind: discoverPublish, Name: v.Name, Medium: present[v.Device], Volume: vols[v.Name]})
		}
	}
	for _, id := range ids {
		m := present[id]
		if selects != nil && !selects(m) {
			continue
		}
		for _, part := range freeUnits(m, blank) {
			name := VolumeName(nodeID, UnitKey(id, part))
			if !pvNames[name] && vols[name] == nil {
				out = append(out, discoveryAction{Kind: discoverCreate, Name: name, Medium: m, Partition: part})
			}
		}
	}
	return out
}

// handleOnNode tells whether a PV is a CSI volume whose ID names this node.
func handleOnNode(pv *corev1.PersistentVolume, nodeID string) bool {
	if pv.Spec.CSI == nil {
		return false
	}
	id, err := volume.ParseID(pv.Spec.CSI.VolumeHandle)
	return err == nil && id.Node == nodeID
}

// freeUnits are the parts of a medium a discovered volume may take: each free FAT partition of a
// partitioned one (by its ID), or a free superfloppy, or a blank one when blank media are
// published, whole ("").
func freeUnits(m media.Status, blank bool) []string {
	if m.Content == "partition" {
		var out []string
		for _, p := range m.Partitions {
			if p.State == media.StateFAT {
				out = append(out, p.ID())
			}
		}
		return out
	}
	if m.State == media.StateFAT || (blank && m.State == media.StateBlank) {
		return []string{""}
	}
	return nil
}
