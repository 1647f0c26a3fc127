package driver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registration answers the kubelet's plugin watcher, as the node-driver-registrar sidecar does:
// the kubelet finds the socket under its plugins_registry directory, asks GetInfo for the
// driver's name and CSI endpoint, and reports whether it registered the plugin. It lets the
// driver run without that sidecar.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	name     string
	endpoint string // the CSI socket as the kubelet sees it

	socket   string
	server   *grpc.Server
	listener net.Listener

	mu     sync.Mutex
	status error // the kubelet's last answer; nil before it answers or once it registered us
}

// registrationSocket is where the kubelet's plugin watcher looks for the driver: the name
// node-driver-registrar uses, so either can be swapped for the other.
func registrationSocket(dir, driverName string) string {
	return filepath.Join(dir, driverName+"-reg.sock")
}

// listenRegistration listens on the registration socket in dir; the kubelet's plugin watcher
// notices the new socket and calls GetInfo.
func listenRegistration(dir, driverName, kubeletEndpoint string) (*registration, error) {
	r := &registration{name: driverName, endpoint: kubeletEndpoint, socket: registrationSocket(dir, driverName)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kubelet registration directory %s: %w", dir, err)
	}
	if err := removeStaleSocket(r.socket); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", r.socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", r.socket, err)
	}
	r.listener = ln
	r.server = grpc.NewServer()
	registerapi.RegisterRegistrationServer(r.server, r)
	return r, nil
}

func (r *registration) serve(served chan<- error) {
	klog.InfoS("serving kubelet plugin registration", "socket", r.socket, "csiEndpoint", r.endpoint)
	go func() {
		if err := r.server.Serve(r.listener); err != nil {
			served <- fmt.Errorf("kubelet registration server: %w", err)
		}
	}()
}

// stop removes the socket first, so the kubelet deregisters the plugin and does not call a
// driver that is going away.
func (r *registration) stop() {
	os.Remove(r.socket)
	r.server.Stop()
}

// GetInfo tells the kubelet what plugin this is and where its CSI endpoint is.
func (r *registration) GetInfo(ctx context.Context, req *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

// NotifyRegistrationStatus records the kubelet's verdict. A refusal makes the health check
// fail, so the liveness probe restarts the driver and the kubelet sees a fresh socket: the same
// recovery node-driver-registrar gets by exiting.
func (r *registration) NotifyRegistrationStatus(ctx context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.PluginRegistered {
		klog.InfoS("registered with the kubelet", "driver", r.name)
		r.status = nil
	} else {
		r.status = fmt.Errorf("the kubelet refused to register %s: %s", r.name, st.Error)
		klog.ErrorS(r.status, "kubelet plugin registration")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// healthy is nil unless the kubelet refused the plugin.
func (r *registration) healthy() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}
