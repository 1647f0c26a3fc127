package chart

import (
	"strconv"
	"testing"
)

// The host paths the shared contract fixes for the default values.
const (
	kubeletDir      = "/var/lib/kubelet"
	pluginDir       = "/var/lib/kubelet/plugins/fat.csi-fat.io"
	kubeletSocket   = "/var/lib/kubelet/plugins/fat.csi-fat.io/csi.sock"
	registrationDir = "/var/lib/kubelet/plugins_registry"
)

func TestDriverContainer(t *testing.T) {
	pod := render(t).nodePlugin(t)
	c := pod.container(t, "csi-fat")

	if c.Image != "ghcr.io/csi-fat/csi-fat:0.1.0" {
		t.Errorf("driver image %q, want the appVersion tag", c.Image)
	}
	if len(c.Args) == 0 || c.Args[0] != "driver" {
		t.Fatalf("driver args %v, want the driver subcommand first", c.Args)
	}
	c.checkFlags(t, map[string]string{
		"endpoint":       "unix:///csi/csi.sock",
		"driver-name":    "fat.csi-fat.io",
		"pool-dir":       "/var/lib/csi-fat/pool",
		"state-dir":      "/var/lib/csi-fat/state",
		"reserve":        "1G",
		"max-volumes":    "64",
		"health-address": ":9808",
		"v":              "2",
	})
	// The node ID defaults to $NODE_NAME, which must be the Kubernetes node name.
	if c.flag(t, "node-id") != "" {
		t.Errorf("--node-id set by default: %v", c.Args)
	}
	if got := c.envFieldPath("NODE_NAME"); got != "spec.nodeName" {
		t.Errorf("driver NODE_NAME from %q, want spec.nodeName", got)
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("driver container not privileged: FUSE mounts and Bidirectional propagation need it")
	}

	// Liveness: GET /healthz on the --health-address port.
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Fatalf("driver liveness probe %+v, want httpGet /healthz", c.LivenessProbe)
	}
	if port := probePort(c); port != 9808 {
		t.Errorf("liveness probe port resolves to %d, want 9808", port)
	}

	// Host paths, each at the path the driver is told.
	for mountPath, wantHost := range map[string]string{
		"/csi":                   pluginDir,
		kubeletDir:               kubeletDir,
		"/var/lib/csi-fat/pool":  "/var/lib/csi-fat/pool",
		"/var/lib/csi-fat/state": "/var/lib/csi-fat/state",
		"/dev":                   "/dev",
		"/sys":                   "/sys",
	} {
		if hp, _ := pod.hostPathOf(c, mountPath); hp != wantHost {
			t.Errorf("driver mount %s is host path %q, want %q", mountPath, hp, wantHost)
		}
	}
	// Staging and target paths lie under the kubelet directory: the FUSE and bind mounts made
	// in the container must reach the host.
	if _, m := pod.hostPathOf(c, kubeletDir); m.MountPropagation != "Bidirectional" {
		t.Errorf("kubelet directory propagation %q, want Bidirectional", m.MountPropagation)
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != kubeletDir && m.MountPropagation != "" {
			t.Errorf("mount %s has propagation %s; only the kubelet directory needs it", m.MountPath, m.MountPropagation)
		}
	}
}

// probePort resolves the driver's liveness probe port (a name or a number) to a number.
func probePort(c container) int {
	switch p := c.LivenessProbe.HTTPGet.Port.(type) {
	case float64:
		return int(p)
	case string:
		for _, cp := range c.Ports {
			if cp.Name == p {
				return cp.ContainerPort
			}
		}
		n, _ := strconv.Atoi(p)
		return n
	}
	return 0
}

func TestHealthPortMovesProbeAndFlag(t *testing.T) {
	c := render(t, "--set", "driver.healthPort=9900").nodePlugin(t).container(t, "csi-fat")
	if got := c.flag(t, "health-address"); got != ":9900" {
		t.Errorf("--health-address=%q, want :9900", got)
	}
	if port := probePort(c); port != 9900 {
		t.Errorf("liveness probe port %d, want 9900", port)
	}
}

func TestProvisionerSidecar(t *testing.T) {
	pod := render(t).nodePlugin(t)
	p := pod.container(t, "csi-provisioner")
	if p.Image != "registry.k8s.io/sig-storage/csi-provisioner:v6.4.0" {
		t.Errorf("provisioner image %q", p.Image)
	}
	for _, arg := range []string{
		"--csi-address=/csi/csi.sock",
		"--node-deployment",
		"--enable-capacity",
		"--capacity-ownerref-level=1", // the DaemonSet owns the CSIStorageCapacity objects
		"--strict-topology",
		"--immediate-topology=false",
		"--extra-create-metadata",
	} {
		if !p.hasArg(arg) {
			t.Errorf("provisioner lacks %s; args %v", arg, p.Args)
		}
	}
	for env, field := range map[string]string{
		"NODE_NAME": "spec.nodeName",
		"NAMESPACE": "metadata.namespace",
		"POD_NAME":  "metadata.name",
	} {
		if got := p.envFieldPath(env); got != field {
			t.Errorf("provisioner %s from %q, want %q", env, got, field)
		}
	}
	// It reaches the driver's socket through the same host directory.
	driver := pod.container(t, "csi-fat")
	dh, _ := pod.hostPathOf(driver, "/csi")
	ph, _ := pod.hostPathOf(p, "/csi")
	if ph == "" || ph != dh {
		t.Errorf("provisioner /csi is host %q, driver's %q", ph, dh)
	}
	if p.SecurityContext != nil && p.SecurityContext.Privileged != nil && *p.SecurityContext.Privileged {
		t.Error("provisioner is privileged; it only talks to the API server and the socket")
	}
}

func TestPodSettings(t *testing.T) {
	r := render(t)
	var ds daemonSet
	r.get(t, "DaemonSet", &ds)
	pod := ds.Spec.Template.Spec
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", pod.PriorityClassName)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v", pod.NodeSelector)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("selector label %s=%s not on the pod template", k, v)
		}
	}
	var sa []object = r.all("ServiceAccount")
	if len(sa) != 1 || sa[0].Name != pod.ServiceAccountName || sa[0].Metadata.Namespace != namespace {
		t.Errorf("pod service account %q; rendered service accounts %v", pod.ServiceAccountName, sa)
	}

	custom := render(t,
		"--set", "priorityClassName=",
		"--set", "nodeSelector.disk=usb",
		"--set-json", `tolerations=[{"key":"storage","operator":"Exists","effect":"NoSchedule"}]`,
		"--set", "image.pullPolicy=Always",
		"--set", "provisioner.image.pullPolicy=IfNotPresent",
	).nodePlugin(t)
	if custom.PriorityClassName != "" {
		t.Errorf("priorityClassName %q after setting it empty", custom.PriorityClassName)
	}
	if custom.NodeSelector["disk"] != "usb" {
		t.Errorf("nodeSelector %v", custom.NodeSelector)
	}
	if len(custom.Tolerations) != 1 || custom.Tolerations[0]["key"] != "storage" {
		t.Errorf("tolerations %v", custom.Tolerations)
	}
	for name, want := range map[string]string{
		"csi-fat":               "Always",
		"node-driver-registrar": "Always", // inherits image.pullPolicy
		"csi-provisioner":       "IfNotPresent",
	} {
		if got := custom.container(t, name).ImagePullPolicy; got != want {
			t.Errorf("%s imagePullPolicy %q, want %q", name, got, want)
		}
	}
}

func TestMetrics(t *testing.T) {
	r := render(t)
	c := r.nodePlugin(t).container(t, "csi-fat")
	if got := c.flag(t, "metrics-address"); got != ":9810" {
		t.Errorf("--metrics-address=%q, want :9810", got)
	}
	if len(r.all("Service")) != 0 {
		t.Error("a metrics Service rendered though metrics.service.enabled is false")
	}

	r = render(t, "--set", "metrics.port=9999", "--set", "metrics.service.enabled=true")
	if got := r.nodePlugin(t).container(t, "csi-fat").flag(t, "metrics-address"); got != ":9999" {
		t.Errorf("--metrics-address=%q, want :9999", got)
	}
	var svc struct {
		Spec struct {
			Selector map[string]string `json:"selector"`
			Ports    []struct {
				TargetPort any `json:"targetPort"`
			} `json:"ports"`
		} `json:"spec"`
	}
	r.get(t, "Service", &svc)
	var ds daemonSet
	r.get(t, "DaemonSet", &ds)
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("Service selects %s=%s, which the driver pods lack", k, v)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != "metrics" {
		t.Errorf("Service ports %+v, want target port metrics", svc.Spec.Ports)
	}

	off := render(t, "--set", "metrics.enabled=false", "--set", "metrics.service.enabled=true")
	if c := off.nodePlugin(t).container(t, "csi-fat"); c.flag(t, "metrics-address") != "" {
		t.Errorf("--metrics-address given with metrics off: %v", c.Args)
	}
	if len(off.all("Service")) != 0 {
		t.Error("metrics Service rendered with metrics off")
	}
}
