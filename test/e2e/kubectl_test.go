package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// commandTimeout bounds every kubectl and helm call, so a hung apiserver fails the test instead
// of stalling it until go test's own timeout.
const commandTimeout = 2 * time.Minute

// kube runs kubectl and helm against the test cluster.
type kube struct {
	kubectl, helm string
	kubeconfig    string
}

// cmdError carries what a failed command said, so a failure names the command and its output.
type cmdError struct {
	args   []string
	err    error
	stderr string
}

func (e *cmdError) Error() string {
	return fmt.Sprintf("%s: %v: %s", strings.Join(e.args, " "), e.err, strings.TrimSpace(e.stderr))
}

func (e *cmdError) Unwrap() error { return e.err }

// run runs a tool with stdin (may be nil) and returns its stdout.
func (k *kube) run(ctx context.Context, stdin io.Reader, tool string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &cmdError{args: append([]string{tool}, args...), err: err, stderr: stderr.String()}
	}
	return stdout.Bytes(), nil
}

// kubectlErr runs kubectl and returns its stdout.
func (k *kube) kubectlErr(args ...string) ([]byte, error) {
	return k.run(context.Background(), nil, k.kubectl, args...)
}

// kubectlT runs kubectl and fails the test if it fails.
func (k *kube) kubectlT(t testing.TB, args ...string) string {
	t.Helper()
	out, err := k.kubectlErr(args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// getJSON runs kubectl get ... -o json into v.
func (k *kube) getJSON(v any, args ...string) error {
	out, err := k.kubectlErr(append(append([]string{"get"}, args...), "-o", "json")...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("kubectl get %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// getJSONT is getJSON failing the test on error.
func (k *kube) getJSONT(t testing.TB, v any, args ...string) {
	t.Helper()
	if err := k.getJSON(v, args...); err != nil {
		t.Fatal(err)
	}
}

// apply creates or updates the objects of a manifest (JSON or YAML).
func (k *kube) apply(t testing.TB, manifest []byte) {
	t.Helper()
	if _, err := k.run(context.Background(), bytes.NewReader(manifest), k.kubectl, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\nmanifest:\n%s", err, manifest)
	}
}

// applyObjects applies objects built as Go values, as one JSON List.
func (k *kube) applyObjects(t testing.TB, objects ...any) {
	t.Helper()
	list, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": objects})
	if err != nil {
		t.Fatal(err)
	}
	k.apply(t, list)
}

// exec runs a command in a pod's container, with stdin when not nil.
func (k *kube) exec(ns, pod string, stdin io.Reader, command ...string) (stdout string, err error) {
	args := []string{"exec", "-n", ns, pod}
	if stdin != nil {
		args = append(args, "-i")
	}
	out, err := k.run(context.Background(), stdin, k.kubectl, append(append(args, "--"), command...)...)
	return string(out), err
}

// sh runs a shell script in a pod and fails the test if it fails.
func (k *kube) sh(t testing.TB, ns, pod, script string) string {
	t.Helper()
	out, err := k.exec(ns, pod, nil, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatalf("in pod %s/%s: %v\nstdout: %s", ns, pod, err, out)
	}
	return out
}

// helmErr runs helm and returns its stdout.
func (k *kube) helmErr(args ...string) ([]byte, error) {
	return k.run(context.Background(), nil, k.helm, args...)
}

// exists tells whether kubectl get finds an object (kubectl get <args> --ignore-not-found).
func (k *kube) exists(args ...string) (bool, error) {
	out, err := k.kubectlErr(append(append([]string{"get"}, args...), "--ignore-not-found", "-o", "name")...)
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(out)) != "", nil
}

// follow starts kubectl with its stdout as a stream (kubectl logs -f); cancel ctx or let the
// stream end, then Wait.
func (k *kube) follow(ctx context.Context, args ...string) (*exec.Cmd, io.ReadCloser, error) {
	cmd := exec.CommandContext(ctx, k.kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return cmd, out, nil
}
