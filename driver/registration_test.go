package driver

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// getHealth answers the health check's status code and body.
func getHealth(t *testing.T, td *testDriver) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + td.HealthAddr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestKubeletRegistration plays the kubelet's plugin watcher against the registration socket:
// GetInfo names the driver and the CSI socket as the kubelet sees it, a refusal fails the
// health check, and the socket goes away when the driver stops.
func TestKubeletRegistration(t *testing.T) {
	regDir := filepath.Join(t.TempDir(), "plugins_registry")
	td := startDriver(t, "", func(c *Config) {
		c.DriverName = "fat.example.org"
		c.HealthAddress = "127.0.0.1:0"
		c.KubeletRegistrationDir = regDir
	})
	socket := filepath.Join(regDir, "fat.example.org-reg.sock")
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo on %s: %v", socket, err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "fat.example.org" ||
		info.Endpoint != "/var/lib/kubelet/plugins/fat.example.org/csi.sock" {
		t.Errorf("GetInfo = type %q name %q endpoint %q", info.Type, info.Name, info.Endpoint)
	}
	if len(info.SupportedVersions) == 0 {
		t.Error("GetInfo names no supported CSI version")
	}

	if code, body := getHealth(t, td); code != http.StatusOK {
		t.Fatalf("healthz before the kubelet answered: %d %s", code, body)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "version mismatch"}); err != nil {
		t.Fatal(err)
	}
	if code, body := getHealth(t, td); code != http.StatusServiceUnavailable || !strings.Contains(body, "version mismatch") {
		t.Errorf("healthz after a refusal: %d %q, want 503 naming the kubelet's reason", code, body)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if code, body := getHealth(t, td); code != http.StatusOK {
		t.Errorf("healthz after registration: %d %s", code, body)
	}

	td.Stop()
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("registration socket after stop: %v, want it gone", err)
	}
}

// TestKubeletRegistrationPath: the endpoint handed to the kubelet is the configured one.
func TestKubeletRegistrationPath(t *testing.T) {
	regDir := t.TempDir()
	startDriver(t, "", func(c *Config) {
		c.KubeletRegistrationDir = regDir
		c.KubeletRegistrationPath = "/host/plugins/x/csi.sock"
	})
	conn, err := grpc.NewClient("unix://"+filepath.Join(regDir, DefaultDriverName+"-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Endpoint != "/host/plugins/x/csi.sock" {
		t.Errorf("endpoint %q, want the configured path", info.Endpoint)
	}
}

// TestHealthSharesMetricsAddress: one listener serves both when the addresses are equal.
func TestHealthSharesMetricsAddress(t *testing.T) {
	td := startDriver(t, "", func(c *Config) {
		c.HealthAddress = "127.0.0.1:0"
		c.MetricsAddress = "127.0.0.1:0"
	})
	if td.HealthAddr().String() != td.MetricsAddr().String() {
		t.Fatalf("health on %s, metrics on %s: want one server", td.HealthAddr(), td.MetricsAddr())
	}
	if code, _ := getHealth(t, td); code != http.StatusOK {
		t.Errorf("healthz: %d", code)
	}
	resp, err := http.Get("http://" + td.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("metrics: %d", resp.StatusCode)
	}
}
