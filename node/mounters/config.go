package mounters

import (
	"fmt"
	"time"
)

// Where FUSE servers run.
const (
	// InProcess serves every volume in the plugin's own process: a restart of the plugin
	// kills every mount. The zero Config's mode.
	InProcess = "inprocess"
	// Process serves each volume in a mounter process of its own, started by the plugin
	// in a session of its own and as an unprivileged user, which outlives the plugin.
	Process = "process"
)

// Config says where and how volumes are served.
type Config struct {
	// Mode is InProcess ("" too), Process or Pod.
	Mode string `json:"mode,omitempty"`
	// Pod makes the pods of Pod; with it, orphaned mounter pods are removed in any mode.
	Pod *PodConfig `json:"pod,omitempty"`
	// Command runs a mounter: the csi-fat binary and "mounter" (default: this executable).
	Command []string `json:"command,omitempty"`
	// UID and GID the mounter runs as (default 65534, nobody); the mounter needs no privilege.
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`
	// CheckTimeout bounds the check and repair before serving (default 10 minutes): a mounter
	// that takes longer, say on a hostile image that makes the checker loop, is killed.
	CheckTimeout time.Duration `json:"checkTimeout,omitempty"`
	// ProbeTimeout bounds a look at what a removable medium holds (default 10 seconds), done in
	// a short-lived unprivileged process of its own outside InProcess: one that takes
	// longer is killed and the medium reported unreadable.
	ProbeTimeout time.Duration `json:"probeTimeout,omitempty"`
	// ProbeCommand runs that look instead of Command's binary with "probe-medium"; only tests
	// set it, to stand in a prober that misbehaves.
	ProbeCommand []string `json:"probeCommand,omitempty"`
	// Version is the version of the mounters this plugin starts (the driver's). A mounter
	// found serving with another version (OpBuild) is replaced by one of this plugin's, by a
	// hand-over of its live connection, unless NoUpgrade.
	Version string `json:"version,omitempty"`
	// NoUpgrade leaves mounters of another version serving until their volume is unstaged.
	NoUpgrade bool `json:"noUpgrade,omitempty"`
}

// process tells whether volumes are served by mounters (processes or pods), not in this process.
func (c Config) OutOfProcess() bool { return c.Mode == Process || c.Mode == Pod }

// checkTimeout is CheckTimeout with its default.
func (c Config) CheckLimit() time.Duration {
	if c.CheckTimeout <= 0 {
		return defaultCheckTimeout
	}
	return c.CheckTimeout
}

func (c Config) Validate() error {
	switch c.Mode {
	case "", InProcess, Process:
		return nil
	case Pod:
		if c.Pod == nil || c.Pod.Pods == nil || c.Pod.Namespace == "" || c.Pod.Image == "" || c.Pod.KubeletDir == "" {
			return fmt.Errorf("mounter mode %s needs an API client, a namespace, an image and the kubelet's directory", Pod)
		}
		return nil
	}
	return fmt.Errorf("mounter mode %q: want %s, %s or %s", c.Mode, Pod, Process, InProcess)
}

// nobody is the default user and group of a mounter.
const nobody = 65534

const (
	// CallTimeout bounds a control request other than check and stop.
	CallTimeout = 10 * time.Second
	// ServeTimeout bounds the serve request: opening the volume reads its FAT.
	ServeTimeout = 2 * time.Minute
	// defaultCheckTimeout bounds the check before serving.
	defaultCheckTimeout = 10 * time.Minute
)

// mountersDir is the state directory's subdirectory of mounter sockets and logs.
const mountersDir = "mounters"
