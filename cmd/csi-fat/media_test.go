package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/usbtest"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// freeAddress is a loopback address with a port nobody listens on now.
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startMediaDriver runs `csi-fat driver` with the removable-media pool on a fake sysfs tree,
// spelt with the flags' first names (--usb-*), which must keep working, and the new ones, and
// waits until it serves HTTP at metrics.
func startMediaDriver(t *testing.T, bin string, fake *usbtest.Fake, metrics string, extra ...string) {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"driver", "--endpoint", "unix://" + filepath.Join(dir, "csi.sock"), "--node-id", "media-node",
		"--pool-dir", filepath.Join(dir, "pool"), "--state-dir", filepath.Join(dir, "state"), "--metrics-address", metrics,
		"--usb-pool", "--usb-sysfs-root", fake.SysfsRoot, "--usb-by-id-dir", fake.ByIDDir, "--media-by-path-dir", fake.ByPathDir,
		"--media-device-glob", fake.Glob}, extra...)
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver does not serve metrics at %s: %v\n%s", metrics, err, stderr.String())
		}
	}
}

// TestMediaCommand: `csi-fat media` prints the running driver's removable-media status, as a
// table and as JSON: a blank stick, one the deny list (--usb-deny-serial, the first spelling)
// leaves out, and a fixed disk an include pattern (--media-include-by-path) makes a member.
// Against a driver without the pool it fails, saying so.
func TestMediaCommand(t *testing.T) {
	testenv.RequireRoot(t, "loop devices")
	testenv.RequireLoop(t)
	bin := buildCsiFat(t)
	fake := usbtest.New(t)
	blank := fake.Add(t, 40<<20, "Fake", "Blank", "CMD00001")
	denied := fake.Add(t, 48<<20, "Fake", "Old", "CMD00002")
	disk := fake.AddDisk(t, 56<<20, "Bay_Disk", "CMD00003")
	metrics := freeAddress(t)
	startMediaDriver(t, bin, fake, metrics, "--usb-deny-serial", "CMD00002", "--media-include-by-path", disk.ByPath)

	out, err := exec.Command(bin, "media", "--address", metrics).CombinedOutput()
	if err != nil {
		t.Fatalf("csi-fat media: %v\n%s", err, out)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = strings.Join(f, " ")
		}
	}
	for _, want := range []string{
		"DEVICE ID SIZE STATE CONTENT REASON",
		blank.Kernel + " " + blank.ByID + " 40MiB blank - blank: formatted for a new volume",
		disk.Kernel + " " + disk.ByID + " 56MiB blank - blank: formatted for a new volume",
		denied.Kernel + " " + denied.ByID + " 48MiB denied - left out by the allow and deny lists",
	} {
		if got := rows[strings.Fields(want)[0]]; got != want {
			t.Errorf("csi-fat media row %q, want %q:\n%s", got, want, out)
		}
	}

	out, err = exec.Command(bin, "media", "--address", metrics, "--json").Output()
	if err != nil {
		t.Fatalf("csi-fat media --json: %v\n%s", err, out)
	}
	var seen []media.Status
	if err := json.Unmarshal(out, &seen); err != nil || len(seen) != 3 {
		t.Fatalf("csi-fat media --json: %v\n%s", err, out)
	}
	// Members first, smallest first, then the one the lists leave out.
	if m := seen[1]; m.Kernel != disk.Kernel || len(m.ByPath) != 1 || m.ByPath[0] != disk.ByPath || m.Vendor != "ATA" || m.Model != "Bay_Disk" {
		t.Errorf("the included disk, second: %+v", m)
	}
	if seen[0].Kernel != blank.Kernel || seen[2].Kernel != denied.Kernel {
		t.Errorf("order %s, %s, %s; want %s, %s, %s", seen[0].Kernel, seen[1].Kernel, seen[2].Kernel, blank.Kernel, disk.Kernel, denied.Kernel)
	}

	plain := freeAddress(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "driver", "--endpoint", "unix://"+filepath.Join(dir, "csi.sock"), "--node-id", "plain",
		"--pool-dir", filepath.Join(dir, "pool"), "--state-dir", filepath.Join(dir, "state"), "--metrics-address", plain)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + plain + "/metrics"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the driver without the pool does not serve metrics")
		}
	}
	out, err = exec.Command(bin, "media", "--address", plain).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "--media-pool") {
		t.Errorf("csi-fat media against a driver without the pool: %v\n%s", err, out)
	}
}
