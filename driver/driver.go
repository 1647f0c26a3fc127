// Package driver is csi-fat's CSI plugin: the identity and controller services and the node
// service of package node, on one gRPC server on a unix socket. Volumes live on the node that
// makes them, so every node runs all three services; in Kubernetes the csi-provisioner sidecar
// runs beside it in distributed mode (--node-deployment) and calls the controller service of the
// node a volume is wanted on.
package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/node"
	"github.com/csi-fat/csi-fat/node/discovery"
)

// DefaultDriverName is the CSI driver name unless --driver-name says otherwise.
const DefaultDriverName = "fat.csi-fat.io"

// Version is the driver's version, reported by GetPluginInfo; release builds set it with
// -ldflags "-X github.com/csi-fat/csi-fat/driver.Version=...".
var Version = "dev"

// TopologyKey is the key of the one topology segment, whose value is the node ID: every
// volume is accessible only on the node it was made on. It is the driver name followed by
// "/node", e.g. fat.csi-fat.io/node, so that two installations under different names do not
// mix.
func TopologyKey(driverName string) string { return driverName + "/node" }

// Config configures a driver.
type Config struct {
	// Endpoint is where the gRPC server listens: unix:///path/to/csi.sock.
	Endpoint string
	// DriverName is the CSI driver name (a DNS name of at most 63 characters).
	DriverName string
	// MetricsAddress is where Prometheus metrics are served over HTTP (host:port); "" for none.
	MetricsAddress string
	// HealthAddress is where GET /healthz answers for a liveness probe (host:port); "" for
	// none. It may equal MetricsAddress.
	HealthAddress string
	// KubeletRegistrationDir, when set, is the kubelet's plugins_registry directory: the driver
	// registers itself there instead of relying on the node-driver-registrar sidecar.
	KubeletRegistrationDir string
	// KubeletRegistrationPath is the CSI socket's path as the kubelet sees it (in the host's
	// mount namespace); the default is /var/lib/kubelet/plugins/<driver name>/csi.sock.
	KubeletRegistrationPath string
	// Node configures the node side; its TopologyKey is derived from DriverName.
	Node node.Config
	// Discovery, when set, runs discovery mode (discovery.Run) while the driver runs: every
	// usable removable medium published as a PersistentVolume. Its DriverName is set from
	// DriverName.
	Discovery *discovery.Config
}

// Driver is a running CSI plugin.
type Driver struct {
	cfg      Config
	manager  *node.Manager
	server   *grpc.Server
	listener net.Listener
	socket   string
	metrics  *metrics
	http     []*http.Server
	addrs    map[string]net.Addr // listening HTTP address by configured address
	reg      *registration

	stopOnce sync.Once
	served   chan error
}

// driverNameRE is the CSI spec's rule for plugin names.
var driverNameRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9.-]{0,61}[a-zA-Z0-9])?$`)

// socketPath takes the socket's path out of a unix:// endpoint.
func socketPath(endpoint string) (string, error) {
	p, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		p, ok = strings.CutPrefix(endpoint, "unix:")
	}
	if !ok || p == "" {
		return "", fmt.Errorf("endpoint %q: want unix:///path/to/socket", endpoint)
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("endpoint %q: the socket path must be absolute", endpoint)
	}
	return p, nil
}

// New checks the configuration, reads the node-local state, serves again what was staged
// before a restart, and listens. Serving starts with Start.
func New(cfg Config) (*Driver, error) {
	if cfg.DriverName == "" {
		cfg.DriverName = DefaultDriverName
	}
	if !driverNameRE.MatchString(cfg.DriverName) {
		return nil, fmt.Errorf("driver name %q: want at most 63 letters, digits, '-' and '.', starting and ending with a letter or digit", cfg.DriverName)
	}
	socket, err := socketPath(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	cfg.Node.TopologyKey = TopologyKey(cfg.DriverName)
	if cfg.Discovery != nil {
		if cfg.Node.USB == nil {
			return nil, fmt.Errorf("media discovery needs the removable-media pool")
		}
		cfg.Discovery.DriverName = cfg.DriverName
		if err := cfg.Discovery.Prepare(); err != nil {
			return nil, err
		}
	}
	if cfg.Node.Mounter.Version == "" {
		// Mounters are this binary: a mounter of another version was started by another driver.
		cfg.Node.Mounter.Version = Version
	}
	m, err := node.NewManager(cfg.Node)
	if err != nil {
		return nil, err
	}
	if err := m.Restore(); err != nil {
		// The plugin still serves: the volumes that failed say so in their condition, and
		// kubelet's next NodeStageVolume tries again.
		klog.ErrorS(err, "restoring staged volumes")
	}
	m.RemoveOrphanedEphemeral()
	d := &Driver{cfg: cfg, manager: m, socket: socket, served: make(chan error, 2)}
	d.metrics = newMetrics(m)
	d.server = grpc.NewServer(grpc.UnaryInterceptor(d.metrics.intercept))
	csi.RegisterIdentityServer(d.server, &identity{name: cfg.DriverName, manager: m})
	csi.RegisterControllerServer(d.server, &controller{m: m})
	csi.RegisterNodeServer(d.server, node.NewService(m))

	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, err
	}
	if err := removeStaleSocket(socket); err != nil {
		return nil, err
	}
	d.listener, err = net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	if err := d.listenHTTP(); err != nil {
		d.listener.Close()
		return nil, err
	}
	if cfg.KubeletRegistrationDir != "" {
		path := cfg.KubeletRegistrationPath
		if path == "" {
			path = filepath.Join("/var/lib/kubelet/plugins", cfg.DriverName, "csi.sock")
		}
		if d.reg, err = listenRegistration(cfg.KubeletRegistrationDir, cfg.DriverName, path); err != nil {
			d.closeHTTP()
			d.listener.Close()
			return nil, err
		}
	}
	return d, nil
}

// removeStaleSocket removes a socket left by an earlier run; anything else at the path is an
// error rather than something to delete.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("endpoint %s exists and is not a socket", path)
	}
	return os.Remove(path)
}

// Start serves gRPC in the background.
func (d *Driver) Start() {
	klog.InfoS("serving CSI", "driver", d.cfg.DriverName, "node", d.cfg.Node.NodeID, "endpoint", d.cfg.Endpoint,
		"topologyKey", TopologyKey(d.cfg.DriverName), "version", Version)
	go func() {
		if err := d.server.Serve(d.listener); err != nil {
			d.served <- fmt.Errorf("grpc server: %w", err)
		}
	}()
	// Registration comes last: the kubelet calls the CSI endpoint as soon as it registers us.
	if d.reg != nil {
		d.reg.serve(d.served)
	}
}

// Run serves until ctx is done or a server fails, then stops.
func (d *Driver) Run(ctx context.Context) error {
	d.Start()
	discoveryCtx, stopDiscovery := context.WithCancel(ctx)
	defer stopDiscovery()
	if d.cfg.Discovery != nil {
		go discovery.Run(discoveryCtx, d.cfg.Discovery, d.manager)
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-d.served:
	}
	stopDiscovery()
	d.Stop()
	return err
}

// Stop stops serving gRPC (letting calls in flight finish, for a while) and writes every staged
// volume back. The FUSE mounts end with the process; a new one serves them again.
func (d *Driver) Stop() {
	d.stopOnce.Do(func() {
		if d.reg != nil {
			d.reg.stop()
		}
		done := make(chan struct{})
		go func() { d.server.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			d.server.Stop()
		}
		d.closeHTTP()
		d.manager.Shutdown()
		os.Remove(d.socket)
	})
}

// Manager is the node side.
func (d *Driver) Manager() *node.Manager { return d.manager }

// MetricsAddr is the metrics server's address (with the port chosen, for ":0"), or nil.
func (d *Driver) MetricsAddr() net.Addr { return d.addrs[d.cfg.MetricsAddress] }

// HealthAddr is the health server's address (with the port chosen, for ":0"), or nil.
func (d *Driver) HealthAddr() net.Addr { return d.addrs[d.cfg.HealthAddress] }
