package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDeployInSync: deploy/csi-fat.yaml must be what deploy/render.sh makes from the chart now.
func TestDeployInSync(t *testing.T) {
	helm := helmBinary(t)
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(repoRoot, "deploy", "render.sh"), out)
	cmd.Env = append(os.Environ(), "HELM="+helm)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/render.sh: %v\n%s", err, msg)
	}
	fresh, err := os.ReadFile(filepath.Join(out, "csi-fat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "csi-fat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, committed) {
		t.Fatal("deploy/csi-fat.yaml differs from a fresh render of charts/csi-fat: run deploy/render.sh and commit it")
	}

	// And it is the chart's default render behind a Namespace that admits privileged pods.
	objs, err := parseManifests(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 || objs[0].Kind != "Namespace" || objs[0].Name != namespace ||
		objs[0].Metadata.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Fatalf("first object %+v, want Namespace %s labelled for privileged pods", objs[0].Metadata, namespace)
	}
	chart := render(t)
	if len(objs)-1 != len(chart) {
		t.Fatalf("deploy/ has %d objects besides the Namespace, the chart renders %d", len(objs)-1, len(chart))
	}
	for i, o := range chart {
		if d := objs[i+1]; d.Kind != o.Kind || d.Name != o.Name || d.Metadata.Namespace != o.Metadata.Namespace {
			t.Errorf("object %d: deploy/ has %s %s/%s, chart %s %s/%s", i, d.Kind, d.Metadata.Namespace, d.Name, o.Kind, o.Metadata.Namespace, o.Name)
		}
	}
}
