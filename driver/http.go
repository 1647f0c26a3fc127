package driver

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// listenHTTP serves metrics, the health check and the removable-media status, on one server when
// they share an address.
func (d *Driver) listenHTTP() error {
	muxes := map[string]*http.ServeMux{}
	mux := func(addr string) *http.ServeMux {
		if muxes[addr] == nil {
			muxes[addr] = http.NewServeMux()
		}
		return muxes[addr]
	}
	if a := d.cfg.MetricsAddress; a != "" {
		mux(a).Handle("/metrics", d.metrics.handler())
	}
	if a := d.cfg.HealthAddress; a != "" {
		mux(a).HandleFunc("/healthz", d.healthz)
	}
	// The removable-media status goes next to the metrics, else next to the health check.
	if a := cmp.Or(d.cfg.MetricsAddress, d.cfg.HealthAddress); a != "" && d.manager.USBEnabled() {
		mux(a).HandleFunc("/media", d.mediaStatus)
	}
	d.addrs = map[string]net.Addr{}
	for addr, m := range muxes {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			d.closeHTTP()
			return fmt.Errorf("http address %s: %w", addr, err)
		}
		d.addrs[addr] = ln.Addr()
		srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
		d.http = append(d.http, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.served <- fmt.Errorf("http server on %s: %w", addr, err)
			}
		}()
	}
	return nil
}

func (d *Driver) closeHTTP() {
	for _, srv := range d.http {
		srv.Close()
	}
}

// healthz is the liveness check: the same readiness the CSI Probe reports, and a registration
// the kubelet did not refuse. A failure names the reason, for kubectl describe.
func (d *Driver) healthz(w http.ResponseWriter, r *http.Request) {
	err := d.manager.Probe()
	if err == nil && d.reg != nil {
		err = d.reg.healthy()
	}
	if err != nil {
		klog.V(2).InfoS("health check failed", "err", err)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}
