package mounters

import (
	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Launcher starts the mounters of one node's volumes, finds those an earlier plugin process
// started, and ends those nothing needs.
type Launcher struct {
	cfg      Config
	stateDir string // holds the mounters' sockets and logs (mountersDir)
	nodeID   string // the node mounter pods run on
	poolDir  string // the image pool, whose file system decides what a mounter pod is charged
	mounts   *hostmount.Table
}

// NewLauncher is the launcher of cfg's mounters for the node nodeID, whose state lives in
// stateDir and whose image pool is poolDir.
func NewLauncher(cfg Config, stateDir, nodeID, poolDir string) *Launcher {
	return &Launcher{cfg: cfg, stateDir: stateDir, nodeID: nodeID, poolDir: poolDir, mounts: hostmount.NewTable()}
}

// Start starts a mounter for the volume, a pod or a process as configured.
func (l *Launcher) Start(rec volume.Record) (*Mounter, error) {
	if l.cfg.Mode == Pod {
		return l.startPod(rec)
	}
	return l.spawn(rec, false)
}

// StartNext starts a mounter to take over the connection of the volume's current one, which may
// still run (a hand-over) or have left its socket behind: a process gets a socket of its own.
func (l *Launcher) StartNext(rec volume.Record) (*Mounter, error) {
	if l.cfg.Mode == Pod {
		return l.startPod(rec)
	}
	return l.spawn(rec, true)
}

// Version is the version this plugin's mounters run, which those of another are replaced by
// (Config.Version, else this build's).
func (l *Launcher) Version() string { return l.cfg.Version }

// Upgrades tells whether mounters of another version are replaced by a hand-over.
func (l *Launcher) Upgrades() bool { return !l.cfg.NoUpgrade }
