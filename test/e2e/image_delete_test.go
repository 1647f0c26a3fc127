package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"
)

// TestImageDelete checks that deleting a claim of the image pool deletes its volume: the
// PersistentVolume goes and so does the image file in the node's pool.
func TestImageDelete(t *testing.T) {
	e := need(t)
	ns := e.namespace(t)
	e.applyObjects(t, claimObject(ns, "doomed", imageClass, "16Mi"))
	e.startPod(t, ns, podSpec{name: "user", volumes: []podVolume{{claim: "doomed", path: "/data"}}})
	v := e.waitClaimBound(t, ns, "doomed")
	e.writeInPod(t, ns, "user", "/data/file.bin", testData(3, 1<<20))
	img, err := e.imageFile(v.Spec.CSI.VolumeHandle)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("the volume's image: %v", err)
	}
	e.deletePod(t, ns, "user")
	e.kubectlT(t, "delete", "pvc", "-n", ns, "doomed", "--timeout=1m")

	e.waitFor(t, ns, "image file and volume removed", 2*time.Minute, func() (bool, error) {
		if _, err := os.Stat(img); !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("image %s still there (%v)", img, err)
		}
		if there, err := e.exists("pv", v.Metadata.Name); there || err != nil {
			return false, fmt.Errorf("volume %s still there (%v)", v.Metadata.Name, err)
		}
		return true, nil
	})
}
