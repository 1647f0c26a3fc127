package driver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csi-fat/csi-fat/internal/testenv"
	"github.com/csi-fat/csi-fat/node/mounters"
)

// usage returns the usage entry of a unit.
func usage(t *testing.T, resp *csi.NodeGetVolumeStatsResponse, unit csi.VolumeUsage_Unit) *csi.VolumeUsage {
	t.Helper()
	for _, u := range resp.GetUsage() {
		if u.GetUnit() == unit {
			return u
		}
	}
	t.Fatalf("no %v usage in %v", unit, resp)
	return nil
}

// TestVolumeStats: bytes as fsck.fat and mdir count them after unstaging, inodes as the files
// and directories the test made, free inodes as the free space in directory entries, and a
// normal condition, at the staging path and the target alike.
func TestVolumeStats(t *testing.T) {
	requireFUSE(t)
	testenv.RequireTool(t, "fsck.fat", "mdir")
	td := startDriver(t, "", nil)
	ctx := context.Background()
	vol, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "measured", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}, Parameters: map[string]string{"fatType": "16", "clusterSize": "4K"}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	dir := t.TempDir()
	target := stageAndPublish(t, td, id, dir)
	made := 0
	for i := 0; i < 3; i++ {
		sub := filepath.Join(target, fmt.Sprintf("dir%d", i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		made++
		for j := 0; j < 5; j++ {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("file-%d.bin", j)), make([]byte, 10000*(j+1)), 0o644); err != nil {
				t.Fatal(err)
			}
			made++
		}
	}
	if err := os.WriteFile(filepath.Join(target, "ROOT.TXT"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	made++

	var byPath [2]*csi.NodeGetVolumeStatsResponse
	for i, p := range []string{target, filepath.Join(dir, "staging")} {
		resp, err := td.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: p})
		if err != nil {
			t.Fatal(err)
		}
		if c := resp.GetVolumeCondition(); c == nil || c.GetAbnormal() {
			t.Fatalf("condition at %s: %v", p, c)
		}
		byPath[i] = resp
	}
	if byPath[0].String() != byPath[1].String() {
		t.Fatalf("stats differ between target and staging path:\n%v\n%v", byPath[0], byPath[1])
	}
	bytes := usage(t, byPath[0], csi.VolumeUsage_BYTES)
	inodes := usage(t, byPath[0], csi.VolumeUsage_INODES)
	unpublishAndUnstage(t, td, id, dir)

	img := filepath.Join(td.dir, "pool", "measured.img")
	out, _ := exec.Command("fsck.fat", "-n", "-v", img).CombinedOutput()
	m := regexp.MustCompile(`(\d+) files, (\d+)/(\d+) clusters`).FindStringSubmatch(string(out))
	cs := regexp.MustCompile(`(\d+) bytes per cluster`).FindStringSubmatch(string(out))
	if m == nil || cs == nil {
		t.Fatalf("cannot read fsck.fat -v output:\n%s", out)
	}
	clusterSize, _ := strconv.ParseInt(cs[1], 10, 64)
	usedClusters, _ := strconv.ParseInt(m[2], 10, 64)
	totalClusters, _ := strconv.ParseInt(m[3], 10, 64)
	if bytes.GetTotal() != totalClusters*clusterSize || bytes.GetUsed() != usedClusters*clusterSize {
		t.Errorf("bytes total %d used %d; fsck.fat counts %d/%d clusters of %d bytes", bytes.GetTotal(), bytes.GetUsed(), usedClusters, totalClusters, clusterSize)
	}
	mdir, err := exec.Command("mdir", "-i", img, "::/").Output()
	if err != nil {
		t.Fatal(err)
	}
	fm := regexp.MustCompile(`([\d ]+) bytes free`).FindStringSubmatch(string(mdir))
	if fm == nil {
		t.Fatalf("no free bytes in mdir output:\n%s", mdir)
	}
	free, _ := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(fm[1]), " ", ""), 10, 64)
	if bytes.GetAvailable() != free {
		t.Errorf("bytes available %d, mdir says %d free", bytes.GetAvailable(), free)
	}
	if inodes.GetUsed() != int64(made) {
		t.Errorf("inodes used %d, the test made %d files and directories", inodes.GetUsed(), made)
	}
	// Free entries: every free cluster as directory space at two entries per file, plus the
	// fixed root's free slots (512 entries; 4 names there, each a short and a long entry).
	wantFree := free/32/2 + (512-4*2)/2
	if inodes.GetAvailable() != wantFree || inodes.GetTotal() != inodes.GetUsed()+wantFree {
		t.Errorf("inodes available %d total %d, want %d and %d", inodes.GetAvailable(), inodes.GetTotal(), wantFree, inodes.GetUsed()+wantFree)
	}
}

// TestTopology: the node reports its topology, volumes carry it, CreateVolume and GetCapacity
// honour it.
func TestTopology(t *testing.T) {
	td := startDriver(t, "", func(c *Config) { c.DriverName = "fat.example.com"; c.Node.MaxVolumes = 7 })
	ctx := context.Background()
	key := "fat.example.com/node"
	ni, err := td.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ni.GetNodeId() != testNode || ni.GetMaxVolumesPerNode() != 7 || len(ni.GetAccessibleTopology().GetSegments()) != 1 ||
		ni.GetAccessibleTopology().GetSegments()[key] != testNode {
		t.Fatalf("NodeGetInfo = %v", ni)
	}
	here := &csi.Topology{Segments: map[string]string{key: testNode}}
	there := &csi.Topology{Segments: map[string]string{key: "node-b"}}
	zone := &csi.Topology{Segments: map[string]string{key: testNode, "topology.kubernetes.io/zone": "z1"}}
	tests := []struct {
		name    string
		req     *csi.TopologyRequirement
		wantErr bool
	}{
		{"none", nil, false},
		{"requisite here", &csi.TopologyRequirement{Requisite: []*csi.Topology{here}}, false},
		{"requisite there or here", &csi.TopologyRequirement{Requisite: []*csi.Topology{there, here}, Preferred: []*csi.Topology{there}}, false},
		{"requisite there", &csi.TopologyRequirement{Requisite: []*csi.Topology{there}}, true},
		{"requisite with a segment this node lacks", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone}}, true},
	}
	for i, tt := range tests {
		resp, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("topo-%d", i), VolumeCapabilities: []*csi.VolumeCapability{rw},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}, AccessibilityRequirements: tt.req})
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: CreateVolume: %v, want error %v", tt.name, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if topo := resp.GetVolume().GetAccessibleTopology(); len(topo) != 1 || topo[0].GetSegments()[key] != testNode || len(topo[0].GetSegments()) != 1 {
			t.Errorf("%s: volume topology %v, want only %s=%s", tt.name, topo, key, testNode)
		}
		if !strings.HasPrefix(resp.GetVolume().GetVolumeId(), "image:"+testNode+":") {
			t.Errorf("%s: volume ID %q does not name the node", tt.name, resp.GetVolume().GetVolumeId())
		}
	}
	capHere, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{AccessibleTopology: here})
	if err != nil || capHere.GetAvailableCapacity() <= 0 || capHere.GetMaximumVolumeSize().GetValue() != capHere.GetAvailableCapacity() {
		t.Fatalf("GetCapacity here: %v, %v", capHere, err)
	}
	capThere, err := td.ctrl.GetCapacity(ctx, &csi.GetCapacityRequest{AccessibleTopology: there})
	if err != nil || capThere.GetAvailableCapacity() != 0 {
		t.Fatalf("GetCapacity for another node: %v, %v; want 0", capThere, err)
	}
}

// TestMetrics: the metrics endpoint counts CSI calls by method and code, and the device
// requests, bytes and flushes of a staged volume, and the files its server holds for the kernel
// (and a mounter's resident memory), in process and in mounter mode.
func TestMetrics(t *testing.T) {
	requireFUSE(t)
	for _, mode := range []string{mounters.InProcess, mounters.Process} {
		t.Run(mode, func(t *testing.T) { testMetrics(t, mode) })
	}
}

func testMetrics(t *testing.T, mode string) {
	td := startDriver(t, "", func(c *Config) { c.MetricsAddress = "127.0.0.1:0"; c.Node.Mounter.Mode = mode })
	ctx := context.Background()
	vol, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "metered", VolumeCapabilities: []*csi.VolumeCapability{rw},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{}) // one InvalidArgument
	id := vol.GetVolume().GetVolumeId()
	dir := t.TempDir()
	target := stageAndPublish(t, td, id, dir)
	writeSynced(t, filepath.Join(target, "data.bin"), strings.Repeat("x", 1<<20))
	// Files the kernel looks up are nodes the server holds.
	const files = 40
	if err := os.Mkdir(filepath.Join(target, "many"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < files; i++ {
		if err := os.WriteFile(filepath.Join(target, "many", fmt.Sprintf("f%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	body := scrapeMetrics(t, td)
	metric := func(name, labels string) float64 {
		t.Helper()
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+"{"+labels+"}") + ` (\S+)$`)
		m := re.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no %s{%s} in:\n%s", name, labels, body)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	if v := metric("csi_fat_csi_calls_total", `code="OK",method="/csi.v1.Controller/CreateVolume"`); v != 1 {
		t.Errorf("CreateVolume OK calls = %v, want 1", v)
	}
	if v := metric("csi_fat_csi_calls_total", `code="InvalidArgument",method="/csi.v1.Controller/CreateVolume"`); v != 1 {
		t.Errorf("CreateVolume InvalidArgument calls = %v, want 1", v)
	}
	if v := metric("csi_fat_csi_call_duration_seconds_count", `method="/csi.v1.Node/NodeStageVolume"`); v != 1 {
		t.Errorf("NodeStageVolume latency count = %v, want 1", v)
	}
	vl := `op="write",volume_id="` + id + `"`
	if v := metric("csi_fat_volume_device_bytes_total", vl); v < 1<<20 {
		t.Errorf("device bytes written = %v, want at least the 1 MiB file", v)
	}
	if v := metric("csi_fat_volume_device_requests_total", vl); v < 1 {
		t.Errorf("device write requests = %v", v)
	}
	if v := metric("csi_fat_volume_device_flushes_total", `volume_id="`+id+`"`); v < 1 {
		t.Errorf("device flushes = %v after fsync", v)
	}
	if v := metric("csi_fat_volume_dirty_bytes", `volume_id="`+id+`"`); v != 0 {
		t.Errorf("dirty bytes = %v after fsync, want 0", v)
	}
	// The root, data.bin, many and its files, unless the kernel forgot some meanwhile.
	if v := metric("csi_fat_volume_server_nodes", `volume_id="`+id+`"`); v < files || v > files+3 {
		t.Errorf("server nodes = %v with %d files just made, want %d to %d", v, files, files, files+3)
	}
	resident := regexp.MustCompile(`(?m)^csi_fat_volume_server_resident_bytes\{volume_id="` + regexp.QuoteMeta(id) + `"\} (\S+)$`).FindStringSubmatch(body)
	switch {
	case mode == mounters.Process && resident == nil:
		t.Errorf("no resident memory of the volume's mounter in:\n%s", body)
	case mode == mounters.Process:
		if v, _ := strconv.ParseFloat(resident[1], 64); v < 4<<20 || v > 1<<30 {
			t.Errorf("the mounter's resident memory = %v bytes", v)
		}
	case resident != nil:
		t.Errorf("a resident memory for a volume served in the plugin's process: %s", resident[0])
	}
	unpublishAndUnstage(t, td, id, dir)
}
