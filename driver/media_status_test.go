package driver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// getMedia reads the driver's /media page in a format ("" for the table).
func getMedia(t *testing.T, td *testDriver, format string) (string, int) {
	t.Helper()
	url := "http://" + td.MetricsAddr().String() + "/media"
	if format != "" {
		url += "?format=" + format
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body), resp.StatusCode
}

// TestMediaStatus: /media lists every device the pool looks at with its state and why it is or
// is not usable, and the metric counts the same: a claimed stick (with its volume), one holding
// exFAT (mkfs.exfat), one with a FAT partition (sfdisk, mkfs.fat), a blank one, one the deny
// list leaves out, one with a partition device-mapper holds, an empty card reader, and a fixed
// SATA disk no include pattern names.
func TestMediaStatus(t *testing.T) {
	requireLoop(t)
	testenv.RequireTool(t, "mkfs.exfat", "sfdisk")
	fake := usbtest.New(t)
	claimed := fake.Add(t, 40<<20, "Fake", "Claimed", "STATUS01")
	exfat := fake.Add(t, 48<<20, "Fake", "Camera", "STATUS02")
	part := fake.Add(t, 56<<20, "Fake", "Card", "STATUS03")
	blank := fake.Add(t, 64<<20, "Fake", "New", "STATUS04")
	denied := fake.Add(t, 72<<20, "Fake", "Old", "STATUS05")
	held := fake.Add(t, 80<<20, "Fake", "Crypt", "STATUS06")
	reader := fake.Add(t, 88<<20, "Fake", "Reader", "STATUS07")
	disk := fake.AddDisk(t, 96<<20, "Root_Disk", "STATUS08")
	run(t, "mkfs.exfat", exfat.Loop)
	sfdisk := exec.Command("sfdisk", "--no-reread", "--no-tell-kernel", "-q", part.Loop)
	sfdisk.Stdin = strings.NewReader("label: dos\nstart=2048, type=c\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	run(t, "mkfs.fat", "--offset=2048", part.Loop, fmt.Sprint((56<<20-1<<20)/1024))
	heldPart := filepath.Join(held.SysDir, held.Kernel+"p1")
	if err := os.MkdirAll(filepath.Join(heldPart, "holders", "dm-7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(heldPart, "dev"), []byte("259:77\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A card reader with no card: sysfs reports no sectors.
	if err := os.WriteFile(filepath.Join(reader.SysDir, "size"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	td := startDriver(t, "", all(withUSB(fake), func(c *Config) {
		c.MetricsAddress = "127.0.0.1:0"
		c.Node.USB.DenySerials = []string{"STATUS05"}
	}))
	vol, err := usbVolume(t, td, "first", 1, map[string]string{volume.ParamSerial: "STATUS01"})
	if err != nil {
		t.Fatal(err)
	}

	body, status := getMedia(t, td, "json")
	if status != http.StatusOK {
		t.Fatalf("/media?format=json: %d %s", status, body)
	}
	var seen []media.Status
	if err := json.Unmarshal([]byte(body), &seen); err != nil {
		t.Fatalf("/media?format=json: %v\n%s", err, body)
	}
	byKernel := map[string]media.Status{}
	for _, m := range seen {
		byKernel[m.Kernel] = m
	}
	for _, c := range []struct {
		s                      *usbtest.Stick
		state, content, reason string
	}{
		{claimed, "claimed", "", "claimed by volume " + vol.GetVolumeId()},
		{exfat, "foreign", "exfat", "it holds an exFAT file system (wipe=true formats it)"},
		{part, "fat", "partition", "holds FAT in partition 1 (57671680 bytes at 1048576): adopted by adopt=true, formatted for a new volume"},
		{blank, "blank", "", "blank: formatted for a new volume"},
		{denied, "denied", "", "left out by the allow and deny lists"},
		{held, "busy", "held", "partition " + held.Kernel + "p1 held by dm-7"},
		{reader, "excluded", "no_medium", "no medium"},
		{disk, "excluded", "not_removable", "not removable, and no include pattern names it"},
	} {
		m, ok := byKernel[c.s.Kernel]
		if !ok {
			t.Errorf("%s (%s) is not listed:\n%s", c.s.Kernel, c.s.Serial, body)
			continue
		}
		if m.State != c.state || m.Content != c.content || m.Reason != c.reason {
			t.Errorf("%s (%s): state %q content %q reason %q; want %q %q %q", c.s.Kernel, c.s.Serial, m.State, m.Content, m.Reason, c.state, c.content, c.reason)
		}
	}
	if m := byKernel[part.Kernel]; m.ID != part.ByID || len(m.ByPath) != 1 || m.ByPath[0] != part.ByPath || m.Size != part.Size || m.Serial != "STATUS03" {
		t.Errorf("the partitioned stick's names: %+v, want ID %s, by-path %s, %d bytes", m, part.ByID, part.ByPath, part.Size)
	}
	if m := byKernel[claimed.Kernel]; m.Volume != vol.GetVolumeId() {
		t.Errorf("the claimed stick's volume %q, want %q", m.Volume, vol.GetVolumeId())
	}

	table, status := getMedia(t, td, "")
	if status != http.StatusOK || !strings.HasPrefix(table, "DEVICE ") {
		t.Fatalf("/media: %d\n%s", status, table)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = strings.Join(f, " ")
		}
	}
	for _, want := range []string{
		exfat.Kernel + " " + exfat.ByID + " 48MiB foreign exfat it holds an exFAT file system (wipe=true formats it)",
		reader.Kernel + " " + reader.ByID + " - excluded no_medium no medium",
		disk.Kernel + " " + disk.ByID + " 96MiB excluded not_removable not removable, and no include pattern names it",
	} {
		if got := rows[strings.Fields(want)[0]]; got != want {
			t.Errorf("/media row %q, want %q:\n%s", got, want, table)
		}
	}
	if _, status := getMedia(t, td, "yaml"); status != http.StatusBadRequest {
		t.Errorf("/media?format=yaml: %d, want 400", status)
	}

	wantDeviceMetrics(t, scrapeMetrics(t, td),
		`csi_fat_usb_devices{content="",state="denied"} 1`,
		`csi_fat_usb_devices{content="no_medium",state="excluded"} 1`,
		`csi_fat_usb_devices{content="not_removable",state="excluded"} 1`,
		`csi_fat_usb_devices{content="held",state="busy"} 1`)
}

// TestMediaStatusOff: without the removable-media pool there is no /media page.
func TestMediaStatusOff(t *testing.T) {
	requireFUSE(t)
	td := startDriver(t, "", func(c *Config) { c.MetricsAddress = "127.0.0.1:0" })
	if _, status := getMedia(t, td, ""); status != http.StatusNotFound {
		t.Errorf("/media without the pool: %d, want 404", status)
	}
}
