package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// inlineImages lists the images of inline volumes in the node's pool.
func (e *environment) inlineImages(t *testing.T) []string {
	t.Helper()
	imgs, err := filepath.Glob(filepath.Join(e.poolDir, "ephemeral-*.img"))
	if err != nil {
		t.Fatal(err)
	}
	return imgs
}

// TestInlineVolume checks a CSI ephemeral inline volume: a pod that names the driver in its own
// spec gets a fresh FAT volume of the size and type its volumeAttributes ask, with no claim; it
// takes the pod's files, df in the pod shows its size, and it goes with the pod, image and all.
func TestInlineVolume(t *testing.T) {
	e := need(t)
	ns := e.namespace(t)
	before := e.inlineImages(t)
	e.startPod(t, ns, podSpec{name: "scratch", volumes: []podVolume{{path: "/data",
		inline: map[string]string{"size": "32Mi", "fatType": "16", "label": "scratch"}}}})
	var img string
	for _, f := range e.inlineImages(t) {
		if !slices.Contains(before, f) {
			if img != "" {
				t.Fatalf("two new inline volumes for one pod: %s and %s", img, f)
			}
			img = f
		}
	}
	if img == "" {
		t.Fatalf("no inline volume's image in %s", e.poolDir)
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 32<<20 {
		t.Fatalf("image %s: %v, %v; want 32 MiB", img, st, err)
	}
	data := testData(5, 1<<20+77)
	e.writeInPod(t, ns, "scratch", "/data/file.bin", data)
	if got := e.sha256InPod(t, ns, "scratch", "/data/file.bin"); got != sha256Hex(data) {
		t.Errorf("file.bin: sha256 %s in the pod, want %s", got, sha256Hex(data))
	}
	fields := strings.Fields(e.sh(t, ns, "scratch", "df -Pk /data | tail -n 1"))
	if len(fields) < 2 {
		t.Fatalf("df -Pk /data: %q", fields)
	}
	if kib, err := strconv.ParseInt(fields[1], 10, 64); err != nil || kib < 28<<10 || kib > 32<<10 {
		t.Errorf("df shows %s KiB in all (%v), want most of 32 MiB", fields[1], err)
	}
	e.deletePod(t, ns, "scratch")
	e.waitFor(t, ns, "inline volume removed", 2*time.Minute, func() (bool, error) {
		if _, err := os.Stat(img); !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("image %s still there (%v)", img, err)
		}
		return true, nil
	})
}
