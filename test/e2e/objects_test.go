package e2e

import (
	"fmt"
	"strconv"
	"strings"
)

// The parts of Kubernetes objects the tests read from kubectl's JSON output.

type objectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	UID             string            `json:"uid"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
	Annotations     map[string]string `json:"annotations"`
}

type condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

type containerStatus struct {
	Name         string `json:"name"`
	Ready        bool   `json:"ready"`
	RestartCount int    `json:"restartCount"`
	State        struct {
		Waiting *struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"waiting"`
	} `json:"state"`
}

type pod struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		NodeName   string `json:"nodeName"`
		Containers []struct {
			Name string `json:"name"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase             string            `json:"phase"`
		Conditions        []condition       `json:"conditions"`
		ContainerStatuses []containerStatus `json:"containerStatuses"`
	} `json:"status"`
}

// ready tells whether the pod's Ready condition is true.
func (p *pod) ready() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

type pvc struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		VolumeName string `json:"volumeName"`
	} `json:"spec"`
	Status struct {
		Phase    string            `json:"phase"`
		Capacity map[string]string `json:"capacity"`
		// What the resizer and the kubelet say of a resize in progress or failed.
		AllocatedResourceStatuses map[string]string `json:"allocatedResourceStatuses"`
		Conditions                []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

// event is what the tests read of an event.
type event struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Source  struct {
		Component string `json:"component"`
		Host      string `json:"host"`
	} `json:"source"`
	ReportingComponent string `json:"reportingComponent"`
	ReportingInstance  string `json:"reportingInstance"`
	Count              int    `json:"count"`
}

type volumeSnapshot struct {
	Metadata objectMeta `json:"metadata"`
	Status   *struct {
		BoundVolumeSnapshotContentName *string `json:"boundVolumeSnapshotContentName"`
		ReadyToUse                     *bool   `json:"readyToUse"`
		RestoreSize                    *string `json:"restoreSize"`
		Error                          *struct {
			Message string `json:"message"`
		} `json:"error"`
	} `json:"status"`
}

type snapshotContent struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Driver            string `json:"driver"`
		DeletionPolicy    string `json:"deletionPolicy"`
		VolumeSnapshotRef struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"volumeSnapshotRef"`
	} `json:"spec"`
	Status *struct {
		SnapshotHandle *string `json:"snapshotHandle"`
		ReadyToUse     *bool   `json:"readyToUse"`
		RestoreSize    *int64  `json:"restoreSize"`
	} `json:"status"`
}

type pv struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Capacity         map[string]string `json:"capacity"`
		StorageClassName string            `json:"storageClassName"`
		ReclaimPolicy    string            `json:"persistentVolumeReclaimPolicy"`
		AccessModes      []string          `json:"accessModes"`
		CSI              *struct {
			Driver       string `json:"driver"`
			VolumeHandle string `json:"volumeHandle"`
		} `json:"csi"`
		ClaimRef *struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"claimRef"`
		NodeAffinity *struct {
			Required struct {
				NodeSelectorTerms []struct {
					MatchExpressions []struct {
						Key    string   `json:"key"`
						Values []string `json:"values"`
					} `json:"matchExpressions"`
				} `json:"nodeSelectorTerms"`
			} `json:"required"`
		} `json:"nodeAffinity"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// nodeAffinity renders a volume's required node affinity as "key in [values]" terms.
func (v *pv) nodeAffinity() string {
	if v.Spec.NodeAffinity == nil {
		return ""
	}
	var terms []string
	for _, term := range v.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, m := range term.MatchExpressions {
			terms = append(terms, fmt.Sprintf("%s in [%s]", m.Key, strings.Join(m.Values, " ")))
		}
	}
	return strings.Join(terms, ", ")
}

type node struct {
	Metadata objectMeta `json:"metadata"`
	Status   struct {
		Conditions   []condition `json:"conditions"`
		VolumesInUse []string    `json:"volumesInUse"`
	} `json:"status"`
}

type csiDriver struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		AttachRequired  *bool  `json:"attachRequired"`
		StorageCapacity *bool  `json:"storageCapacity"`
		FSGroupPolicy   string `json:"fsGroupPolicy"`
	} `json:"spec"`
}

type csiNodeEntry struct {
	Name         string   `json:"name"`
	NodeID       string   `json:"nodeID"`
	TopologyKeys []string `json:"topologyKeys"`
	Allocatable  *struct {
		Count *int `json:"count"`
	} `json:"allocatable"`
}

type csiNode struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Drivers []csiNodeEntry `json:"drivers"`
	} `json:"spec"`
}

type csiStorageCapacity struct {
	Metadata          objectMeta `json:"metadata"`
	StorageClassName  string     `json:"storageClassName"`
	Capacity          string     `json:"capacity"`
	MaximumVolumeSize string     `json:"maximumVolumeSize"`
	NodeTopology      *struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"nodeTopology"`
}

type daemonSet struct {
	Metadata objectMeta `json:"metadata"`
	Status   struct {
		DesiredNumberScheduled int `json:"desiredNumberScheduled"`
		NumberReady            int `json:"numberReady"`
	} `json:"status"`
}

type list[T any] struct {
	Items []T `json:"items"`
}

// parseQuantity reads a Kubernetes quantity of bytes ("960Mi", "67108864", "1G").
func parseQuantity(q string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	num, mult := q, int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w", q, err)
	}
	return n * mult, nil
}
