package discovery

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Discovery mode publishes every usable removable medium of a node as a PersistentVolume of its
// own, as sig-storage-local-static-provisioner does for disks: this file is what such a PV looks
// like, its name, labels and annotations.

// DiscoveryManagedBy is the app.kubernetes.io/managed-by label of every PV discovery mode makes;
// with the node label it is how a node's loop finds its own PVs.
const DiscoveryManagedBy = "csi-fat-discovery"

// Label and annotation names, each after the driver's name (fat.csi-fat.io/serial and so on). The
// node label's key is the topology key, <driver>/node.
const (
	labelManagedBy    = "app.kubernetes.io/managed-by"
	labelSuffixSerial = "/serial"
	labelSuffixVendor = "/vendor"
	labelSuffixModel  = "/model"
	labelSuffixFS     = "/fs-label"
	labelSuffixSize   = "/size"
	// labelSuffixPartition is the partition a volume is in (its number, or a GPT partition's
	// GUID), absent for a medium taken whole.
	labelSuffixPartition = "/partition"
	// labelSuffixPresent is "false" while a bound PV's medium is pulled out, "true" otherwise.
	labelSuffixPresent = "/present"
	// annSuffixMedium is the medium's stable ID, unsanitised (a label value cannot hold every ID).
	annSuffixMedium = "/medium"
	// annSuffixPartition is the partition, as the volume records it; absent for a whole medium.
	annSuffixPartition = "/partition"
	// annSuffixGoneSince is when a bound PV's medium was found gone (RFC 3339), while it is.
	annSuffixGoneSince = "/gone-since"
	// annProvisionedBy names the driver whose external-provisioner deletes the PV (DeleteVolume)
	// once it is released, with reclaim policy Delete: the one of the PV's node, in distributed
	// provisioning.
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
)

// discoveredUnit is what one discovered volume holds: a medium whole (Partition "") or one FAT
// partition of it (its number, or a GPT partition's GUID, as volume.Record.Partition has it).
type discoveredUnit struct{ Medium, Partition string }

// UnitKey names what a discovered volume holds in one string: the medium's ID, and "#" and the
// partition for one partition of it.
func UnitKey(mediumID, partition string) string {
	if partition == "" {
		return mediumID
	}
	return mediumID + "#" + partition
}

// VolumeName is the name of the volume (and of its PV) discovery mode makes for a medium, or
// a partition of it (key, UnitKey), on a node: stable across re-plugging and restarts, a valid
// volume name and PV name (DNS-1123: lower case letters, digits and '-'), at most 4+30+1+16 = 51
// bytes. The node's name is there for the reader; the hash of node and key makes it unique.
func VolumeName(node, key string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + key))
	part := dnsLabelPart(node, 30)
	if part == "" {
		return "fat-" + hex.EncodeToString(sum[:8])
	}
	return "fat-" + part + "-" + hex.EncodeToString(sum[:8])
}

// dnsLabelPart turns s into lower-case letters, digits and single '-', at most max bytes, with
// no '-' at either end.
func dnsLabelPart(s string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= max {
			break
		}
	}
	return strings.Trim(b.String(), "-")
}

// labelValue makes s a valid label value: letters, digits, '-', '_' and '.', other characters
// as one '_' each, at most 63 bytes, beginning and ending with a letter or digit ("" when nothing is left).
// Vendor and model strings of sticks have spaces ("Mass Storage"), which become '_'.
func labelValue(s string) string {
	var b []byte
	for _, c := range strings.TrimSpace(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			b = append(b, byte(c))
		} else {
			b = append(b, '_')
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for len(b) > 0 && !alnum(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && !alnum(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return string(b)
}

// discoveryLabels are the labels a claim's selector picks a medium by; the size is the volume's
// (a partition's, for a volume in one).
func discoveryLabels(driverName, nodeID string, m media.Status, rec volume.Record, fsLabel string) map[string]string {
	l := map[string]string{
		labelManagedBy:                    DiscoveryManagedBy,
		driverName + "/node":              labelValue(nodeID),
		driverName + labelSuffixSize:      strconv.FormatInt(rec.Size, 10),
		driverName + labelSuffixPartition: labelValue(rec.Partition),
		driverName + labelSuffixPresent:   "true",
		driverName + labelSuffixSerial:    labelValue(m.Serial),
		driverName + labelSuffixVendor:    labelValue(m.Vendor),
		driverName + labelSuffixModel:     labelValue(m.Model),
		driverName + labelSuffixFS:        labelValue(fsLabel),
	}
	for k, v := range l {
		if v == "" {
			delete(l, k)
		}
	}
	return l
}

// discoverySelector selects the PVs the loop of this node made.
func discoverySelector(driverName, nodeID string) string {
	return labelManagedBy + "=" + DiscoveryManagedBy + "," + driverName + "/node=" + labelValue(nodeID)
}

// discoveredPV is the PersistentVolume of a discovered medium's volume: reachable on the node
// only (node affinity on the topology key), its capacity the medium's size, ReadWriteOnce (a PV
// cannot have ReadWriteOncePod besides, and one node is what the medium gives).
func (c *Config) discoveredPV(nodeID, topologyKey string, rec volume.Record, m media.Status, fsLabel string) *corev1.PersistentVolume {
	ann := map[string]string{annProvisionedBy: c.DriverName, c.DriverName + annSuffixMedium: rec.Device}
	if rec.Partition != "" {
		ann[c.DriverName+annSuffixPartition] = rec.Partition
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        rec.Name,
			Labels:      discoveryLabels(c.DriverName, nodeID, m, rec, fsLabel),
			Annotations: ann,
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(rec.Size, resource.BinarySI)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: c.ReclaimPolicy,
			StorageClassName:              c.StorageClass,
			MountOptions:                  c.MountOptions,
			VolumeMode:                    ptrTo(corev1.PersistentVolumeFilesystem),
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver:           c.DriverName,
				VolumeHandle:     rec.ID,
				VolumeAttributes: rec.Params.Map(),
			}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: topologyKey, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeID},
				}}}},
			}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// markPatch is the merge patch that marks a PV whose medium is gone (present=false, and since
// when), or clears the mark (present=true, no time).
func (c *Config) markPatch(gone bool, now time.Time) []byte {
	if gone {
		return []byte(`{"metadata":{"labels":{"` + c.DriverName + labelSuffixPresent + `":"false"},"annotations":{"` +
			c.DriverName + annSuffixGoneSince + `":"` + now.UTC().Format(time.RFC3339) + `"}}}`)
	}
	return []byte(`{"metadata":{"labels":{"` + c.DriverName + labelSuffixPresent + `":"true"},"annotations":{"` +
		c.DriverName + annSuffixGoneSince + `":null}}}`)
}
