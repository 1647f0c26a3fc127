// Package chart tests the Helm chart charts/csi-fat through what `helm template` renders from it.
package chart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// repoRoot is the repository's top directory, seen from this package's directory.
const repoRoot = "../.."

var chartDir = filepath.Join(repoRoot, "charts", "csi-fat")

// Release and namespace every render uses, as deploy/render.sh does.
const (
	releaseName = "csi-fat"
	namespace   = "csi-fat"
)

// helmBinary finds helm ($CSI_FAT_HELM, PATH, or the e2e cache); see testenv.RequireHelm.
func helmBinary(t *testing.T) string {
	t.Helper()
	return testenv.RequireHelm(t)
}

// runHelm runs helm with args and returns its standard output, or an error carrying its
// standard error.
func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.Bytes(), nil
}

// templateArgs are the arguments of `helm template` for the chart with extra flags (--set ...).
func templateArgs(flags ...string) []string {
	return append([]string{"template", releaseName, chartDir, "--namespace", namespace}, flags...)
}

// object is one rendered manifest: its kind and name, and its JSON for decoding into a
// kind's own type.
type object struct {
	Kind     string
	Name     string
	JSON     []byte
	Metadata objectMeta
}

type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// rendered is the output of one `helm template`.
type rendered []object

// render runs `helm template` with flags and fails the test if helm fails.
func render(t *testing.T, flags ...string) rendered {
	t.Helper()
	out, err := runHelm(t, templateArgs(flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseManifests(out)
	if err != nil {
		t.Fatalf("parsing helm template output: %v\n%s", err, out)
	}
	return objs
}

// parseManifests splits a multi-document YAML stream at its "---" lines and decodes each
// non-empty document.
func parseManifests(stream []byte) (rendered, error) {
	var objs rendered
	for i, doc := range splitDocuments(stream) {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if string(js) == "null" {
			continue // comments only
		}
		var head struct {
			Kind     string     `json:"kind"`
			Metadata objectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(js, &head); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if head.Kind == "" || head.Metadata.Name == "" {
			return nil, fmt.Errorf("document %d has no kind or name: %s", i, js)
		}
		objs = append(objs, object{Kind: head.Kind, Name: head.Metadata.Name, JSON: js, Metadata: head.Metadata})
	}
	return objs, nil
}

func splitDocuments(stream []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(stream, []byte("\n")) {
		if string(bytes.TrimRight(line, " \r\n")) == "---" {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

// all returns the objects of a kind.
func (r rendered) all(kind string) []object {
	var out []object
	for _, o := range r {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// get decodes the only object of a kind into v, failing the test unless there is exactly one.
func (r rendered) get(t *testing.T, kind string, v any) object {
	t.Helper()
	objs := r.all(kind)
	if len(objs) != 1 {
		t.Fatalf("want one %s, rendered %d", kind, len(objs))
	}
	decode(t, objs[0], v)
	return objs[0]
}

// named decodes the object of a kind and name into v; it reports whether there is one.
func (r rendered) named(t *testing.T, kind, name string, v any) bool {
	t.Helper()
	for _, o := range r.all(kind) {
		if o.Name == name {
			decode(t, o, v)
			return true
		}
	}
	return false
}

func decode(t *testing.T, o object, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(o.JSON))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s %s: %v", o.Kind, o.Name, err)
	}
}

// templateFails runs `helm template` with flags, which must fail; it returns helm's error.
func templateFails(t *testing.T, flags ...string) error {
	t.Helper()
	_, err := runHelm(t, templateArgs(flags...)...)
	if err == nil {
		t.Fatalf("helm template %s succeeded; want it refused", strings.Join(flags, " "))
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("running helm: %v", err)
	}
	return err
}
