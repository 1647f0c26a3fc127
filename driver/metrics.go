package driver

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/node"
)

// metrics are the driver's Prometheus metrics, in a registry of its own so that several drivers
// can live in one process (tests, the demo).
type metrics struct {
	registry *prometheus.Registry
	calls    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(m *node.Manager) *metrics {
	mt := &metrics{
		registry: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "csi_fat_csi_calls_total",
			Help: "CSI calls answered, by method and gRPC status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "csi_fat_csi_call_duration_seconds",
			Help:    "Time to answer CSI calls, by method.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60},
		}, []string{"method"}),
	}
	mt.registry.MustRegister(mt.calls, mt.latency, node.NewCollector(m),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return mt
}

func (mt *metrics) handler() http.Handler {
	return promhttp.HandlerFor(mt.registry, promhttp.HandlerOpts{})
}

// intercept counts, times and logs every call.
func (mt *metrics) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	klog.V(4).InfoS("call", "method", info.FullMethod, "request", req)
	resp, err := handler(ctx, req)
	code := status.Code(err)
	elapsed := time.Since(start)
	mt.calls.WithLabelValues(info.FullMethod, code.String()).Inc()
	mt.latency.WithLabelValues(info.FullMethod).Observe(elapsed.Seconds())
	switch {
	case err == nil:
		klog.V(4).InfoS("answer", "method", info.FullMethod, "response", resp, "duration", elapsed)
	case code == codes.NotFound || code == codes.Aborted:
		klog.V(2).InfoS("call failed", "method", info.FullMethod, "code", code, "err", err)
	default:
		klog.InfoS("call failed", "method", info.FullMethod, "code", code, "err", err)
	}
	return resp, err
}
