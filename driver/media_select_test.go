package driver

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"
)

// TestMediaByPathAndByID: the byPath and byId parameters choose a stick by the port it is
// plugged into and by its by-id name, not the smallest free one; sticks left out are named with
// their names; pool "media" is the same pool as "usb", whose name volume IDs keep.
func TestMediaByPathAndByID(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	fake.Add(t, 40<<20, "Fake", "Port", "PORT0001")
	second := fake.Add(t, 48<<20, "Fake", "Port", "PORT0002")
	third := fake.Add(t, 56<<20, "Fake", "Port", "PORT0003")
	td := startDriver(t, "", all(withUSB(fake)))

	for _, c := range []struct {
		params map[string]string
		want   int64
	}{
		{map[string]string{volume.ParamPool: volume.PoolMedia, volume.ParamByPath: "*-usb-0:2:*"}, second.Size},
		{map[string]string{volume.ParamPool: volume.PoolMedia, volume.ParamByID: "usb-Fake_Port_PORT0003-*"}, third.Size},
		{map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamByPath: "*-usb-0:9:*"}, 0},
	} {
		resp, err := td.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{Parameters: c.params})
		if err != nil || resp.GetAvailableCapacity() != c.want {
			t.Errorf("GetCapacity(%v) = %v, %v; want %d", c.params, resp, err, c.want)
		}
	}
	vol, err := usbVolume(t, td, "port2", 1, map[string]string{volume.ParamPool: volume.PoolMedia, volume.ParamByPath: "*-usb-0:2:*"})
	if err != nil || vol.GetCapacityBytes() != second.Size {
		t.Fatalf("byPath=*-usb-0:2:*: %v, %v; want the stick in port 2", vol, err)
	}
	if id := vol.GetVolumeId(); !strings.HasPrefix(id, volume.PoolUSB+":") {
		t.Errorf("pool=media made volume ID %q, want the pool's name in IDs, usb", id)
	}
	// The same request with pool=usb is the same volume.
	again, err := usbVolume(t, td, "port2", 1, map[string]string{volume.ParamByPath: "*-usb-0:2:*"})
	if err != nil || again.GetVolumeId() != vol.GetVolumeId() {
		t.Errorf("pool=usb for pool=media's volume: %v, %v; want the same volume", again, err)
	}
	vol, err = usbVolume(t, td, "id3", 1, map[string]string{volume.ParamByID: "usb-*_PORT0003-0:0"})
	if err != nil || vol.GetCapacityBytes() != third.Size {
		t.Fatalf("byId=usb-*_PORT0003-0:0: %v, %v; want PORT0003's stick", vol, err)
	}
	_, err = usbVolume(t, td, "none", 1, map[string]string{volume.ParamByPath: "*-usb-0:3:*"})
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `no by-path name (pci-0000:00:14.0-usb-0:1:1.0-scsi-0:0:0:0) matches byPath="*-usb-0:3:*"`) {
		t.Fatalf("byPath of a claimed stick's port: %v, want ResourceExhausted naming the free stick's port", err)
	}
}

// TestMediaInclude: a fixed SATA disk (removable 0, on no USB bus) is not in the pool until an
// include pattern names it by by-path or by-id; then it is claimed and formatted like a stick
// (fsck.fat judges it), identified by its by-id name; the deny lists still apply to it.
func TestMediaInclude(t *testing.T) {
	requireLoop(t)
	fake := usbtest.New(t)
	disk := fake.AddDisk(t, 64<<20, "Bay_Disk", "BAY0001")
	capacity := func(td *testDriver) int64 {
		t.Helper()
		resp, err := td.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{Parameters: map[string]string{volume.ParamPool: volume.PoolMedia}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetAvailableCapacity()
	}
	plain := startDriver(t, "", all(withUSB(fake)))
	if c := capacity(plain); c != 0 {
		t.Fatalf("a fixed disk no pattern names counts %d bytes", c)
	}
	denied := startDriver(t, "", all(withUSB(fake), func(c *Config) {
		c.Node.USB.IncludeByPath = []string{"pci-0000:00:1f.2-ata-*"}
		c.Node.USB.DenyByID = []string{"ata-Bay_*"}
	}))
	if c := capacity(denied); c != 0 {
		t.Fatalf("an included disk the deny list names counts %d bytes", c)
	}
	for _, include := range []func(*Config){
		func(c *Config) { c.Node.USB.IncludeByPath = []string{disk.ByPath} },
		func(c *Config) { c.Node.USB.IncludeByID = []string{"ata-Bay_Disk_*"} },
	} {
		td := startDriver(t, "", all(withUSB(fake), include))
		if c := capacity(td); c != disk.Size {
			t.Fatalf("an included disk: capacity %d, want %d", c, disk.Size)
		}
	}
	td := startDriver(t, "", all(withUSB(fake), func(c *Config) { c.Node.USB.IncludeByPath = []string{disk.ByPath} }))
	vol, err := usbVolume(t, td, "bay", 1, map[string]string{volume.ParamPool: volume.PoolMedia, volume.ParamLabel: "BAY"})
	if err != nil || vol.GetCapacityBytes() != disk.Size {
		t.Fatalf("claiming the included disk: %v, %v", vol, err)
	}
	run(t, "fsck.fat", "-n", disk.Loop)
	if got := run(t, "mlabel", "-s", "-i", disk.Loop, "::"); !strings.Contains(got, "BAY") {
		t.Errorf("mlabel -s on the disk: %q, want BAY", got)
	}
	state, err := os.ReadFile(filepath.Join(td.dir, "state", volume.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"device":\s*"ata-Bay_Disk_BAY0001"`).Match(state) {
		t.Errorf("the volume's device is not the disk's by-id name:\n%s", state)
	}
	if _, err := td.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
}
