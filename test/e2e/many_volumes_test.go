package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestManyVolumes creates ten claims at once, mounts them all in one pod, writes a known amount
// to each and reads the kubelet's volume stats of them, which come from NodeGetVolumeStats.
func TestManyVolumes(t *testing.T) {
	e := need(t)
	ns := e.namespace(t)
	const count = 10
	// Volume i gets i+1 files of fileSize bytes: not a whole number of clusters, so the stats
	// must round each file up to its clusters.
	const fileSize = 256<<10 + 17

	var claims []any
	var vols []podVolume
	for i := range count {
		name := fmt.Sprintf("vol-%d", i)
		claims = append(claims, claimObject(ns, name, imageClass, "32Mi"))
		vols = append(vols, podVolume{claim: name, path: fmt.Sprintf("/v/%d", i)})
	}
	e.applyObjects(t, claims...)
	e.startPod(t, ns, podSpec{name: "many", volumes: vols})

	var script strings.Builder
	type stats struct{ used, capacity, inodesUsed int64 }
	want := map[string]stats{}
	handles := map[string]bool{}
	for i := range count {
		name := fmt.Sprintf("vol-%d", i)
		v := e.waitClaimBound(t, ns, name)
		if handles[v.Spec.CSI.VolumeHandle] {
			t.Fatalf("two claims share volume %s", v.Spec.CSI.VolumeHandle)
		}
		handles[v.Spec.CSI.VolumeHandle] = true
		for k := 0; k <= i; k++ {
			fmt.Fprintf(&script, "head -c %d /dev/zero > /v/%d/file%d && sync /v/%d/file%d && ", fileSize, i, k, i, k)
		}
		// The expected numbers come from the image's boot sector, as mtools reads it.
		img, err := e.imageFile(v.Spec.CSI.VolumeHandle)
		if err != nil {
			t.Fatal(err)
		}
		g, err := minfoGeometry(img)
		if err != nil {
			t.Fatal(err)
		}
		clusters := int64(i+1) * ((fileSize + g.clusterBytes - 1) / g.clusterBytes)
		if g.rootEntries == 0 {
			clusters++ // a FAT32 root directory is a cluster chain: one cluster for these few entries
		}
		want[name] = stats{used: clusters * g.clusterBytes, capacity: g.dataClusters * g.clusterBytes, inodesUsed: int64(i + 1)}
	}
	script.WriteString("echo done")
	if out := e.sh(t, ns, "many", script.String()); out != "done\n" {
		t.Fatalf("writing the files: %q", out)
	}

	// The kubelet asks for volume stats on its own schedule (about once a minute).
	e.waitFor(t, ns, "kubelet volume stats of the ten claims", 4*time.Minute, func() (bool, error) {
		out, err := e.kubectlErr("get", "--raw", "/api/v1/nodes/"+e.node+"/proxy/metrics")
		if err != nil {
			return false, err
		}
		samples, err := parseMetrics(string(out), "kubelet_volume_stats_")
		if err != nil {
			return false, fmt.Errorf("%w: %w", errGiveUp, err)
		}
		got := map[string]map[string]int64{}
		for _, s := range samples {
			if s.labels["namespace"] != ns {
				continue
			}
			claim := s.labels["persistentvolumeclaim"]
			if got[claim] == nil {
				got[claim] = map[string]int64{}
			}
			got[claim][strings.TrimPrefix(s.name, "kubelet_volume_stats_")] = int64(s.value)
		}
		var errs []error
		for claim, w := range want {
			g := got[claim]
			if g["used_bytes"] != w.used || g["capacity_bytes"] != w.capacity || g["inodes_used"] != w.inodesUsed {
				errs = append(errs, fmt.Errorf("%s: used %d bytes, capacity %d, %d inodes used; want %d, %d, %d",
					claim, g["used_bytes"], g["capacity_bytes"], g["inodes_used"], w.used, w.capacity, w.inodesUsed))
				continue
			}
			if g["available_bytes"] != g["capacity_bytes"]-g["used_bytes"] || g["inodes"] != g["inodes_used"]+g["inodes_free"] || g["inodes_free"] <= 0 {
				errs = append(errs, fmt.Errorf("%s: inconsistent stats %v", claim, g))
			}
		}
		return len(errs) == 0, errors.Join(errs...)
	})
}
