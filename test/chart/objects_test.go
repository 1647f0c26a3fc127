package chart

import (
	"strings"
	"testing"
)

// The parts of the Kubernetes objects the tests look at, decoded from the rendered JSON.

type csiDriver struct {
	Spec struct {
		AttachRequired       *bool    `json:"attachRequired"`
		PodInfoOnMount       *bool    `json:"podInfoOnMount"`
		StorageCapacity      *bool    `json:"storageCapacity"`
		FSGroupPolicy        string   `json:"fsGroupPolicy"`
		VolumeLifecycleModes []string `json:"volumeLifecycleModes"`
	} `json:"spec"`
}

type daemonSet struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata objectMeta `json:"metadata"`
			Spec     podSpec    `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type podSpec struct {
	ServiceAccountName string              `json:"serviceAccountName"`
	HostPID            bool                `json:"hostPID"`
	PriorityClassName  string              `json:"priorityClassName"`
	NodeSelector       map[string]string   `json:"nodeSelector"`
	Tolerations        []map[string]string `json:"tolerations"`
	Containers         []container         `json:"containers"`
	Volumes            []podVolume         `json:"volumes"`
}

type container struct {
	Name            string   `json:"name"`
	Image           string   `json:"image"`
	ImagePullPolicy string   `json:"imagePullPolicy"`
	Args            []string `json:"args"`
	Env             []struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `json:"fieldPath"`
			} `json:"fieldRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	SecurityContext *struct {
		Privileged *bool `json:"privileged"`
	} `json:"securityContext"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	LivenessProbe *struct {
		HTTPGet *struct {
			Path string `json:"path"`
			Port any    `json:"port"`
		} `json:"httpGet"`
	} `json:"livenessProbe"`
	VolumeMounts []volumeMount `json:"volumeMounts"`
}

type volumeMount struct {
	Name             string `json:"name"`
	MountPath        string `json:"mountPath"`
	MountPropagation string `json:"mountPropagation"`
}

type podVolume struct {
	Name     string `json:"name"`
	HostPath *struct {
		Path string `json:"path"`
		Type string `json:"type"`
	} `json:"hostPath"`
}

type storageClass struct {
	Metadata             objectMeta        `json:"metadata"`
	Provisioner          string            `json:"provisioner"`
	Parameters           map[string]string `json:"parameters"`
	VolumeBindingMode    string            `json:"volumeBindingMode"`
	AllowVolumeExpansion *bool             `json:"allowVolumeExpansion"`
	ReclaimPolicy        string            `json:"reclaimPolicy"`
	MountOptions         []string          `json:"mountOptions"`
}

type policyRule struct {
	APIGroups []string `json:"apiGroups"`
	Resources []string `json:"resources"`
	Verbs     []string `json:"verbs"`
}

type role struct {
	Rules []policyRule `json:"rules"`
}

type roleBinding struct {
	Subjects []struct {
		Kind      string `json:"kind"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"subjects"`
	RoleRef struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"roleRef"`
}

// nodePlugin is the pod template of the only DaemonSet.
func (r rendered) nodePlugin(t *testing.T) podSpec {
	t.Helper()
	var ds daemonSet
	r.get(t, "DaemonSet", &ds)
	return ds.Spec.Template.Spec
}

// container returns the named container, failing the test without it.
func (p podSpec) container(t *testing.T, name string) container {
	t.Helper()
	c, ok := p.lookup(name)
	if !ok {
		t.Fatalf("no container %q in the node plugin; containers: %v", name, p.containerNames())
	}
	return c
}

func (p podSpec) lookup(name string) (container, bool) {
	for _, c := range p.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return container{}, false
}

func (p podSpec) containerNames() []string {
	var names []string
	for _, c := range p.Containers {
		names = append(names, c.Name)
	}
	return names
}

// hostPathOf is the host path behind a container's mount at mountPath ("" if not mounted or not
// a hostPath), and the mount.
func (p podSpec) hostPathOf(c container, mountPath string) (string, volumeMount) {
	for _, m := range c.VolumeMounts {
		if m.MountPath != mountPath {
			continue
		}
		for _, v := range p.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				return v.HostPath.Path, m
			}
		}
		return "", m
	}
	return "", volumeMount{}
}

// flagValues are the values a container gets for --name (as --name=value), in order.
func (c container) flagValues(name string) []string {
	var vals []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			vals = append(vals, v)
		}
	}
	return vals
}

// flag is the single value of --name, "" when absent; more than one fails the test.
func (c container) flag(t *testing.T, name string) string {
	t.Helper()
	vals := c.flagValues(name)
	switch len(vals) {
	case 0:
		return ""
	case 1:
		return vals[0]
	}
	t.Fatalf("container %s: --%s given %d times: %v", c.Name, name, len(vals), vals)
	return ""
}

// checkFlags checks the single value of each --name the container gets.
func (c container) checkFlags(t *testing.T, want map[string]string) {
	t.Helper()
	for name, w := range want {
		if got := c.flag(t, name); got != w {
			t.Errorf("container %s: --%s=%q, want %q; args %v", c.Name, name, got, w, c.Args)
		}
	}
}

// hasArg reports whether the container has the exact argument.
func (c container) hasArg(arg string) bool {
	for _, a := range c.Args {
		if a == arg {
			return true
		}
	}
	return false
}

// envFieldPath is the downward-API field an environment variable is set from.
func (c container) envFieldPath(name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}
