package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// On a cluster of several nodes (test/e2e/cluster/up.sh 3) each node is node-<i> and sees, in
// its own mount namespace, the directory nodesDir/node-<i>/root<path> of this machine at <path>,
// for defaultHostDir among others (test/e2e/cluster/lib.sh, NODE_LOCAL_DIRS). The chart is told
// the same pool and state directories for every node; each node's driver finds its own there.
const nodesDir = "/var/lib/csi-fat-e2e/nodes"

// nodeHost is a node's host side on a cluster of several nodes: what its driver sees as
// defaultHostDir, from this machine, and its pool, a tmpfs of a size of its own.
type nodeHost struct {
	name      string
	dir       string // defaultHostDir as the node sees it, on this machine
	poolDir   string
	poolBytes int64
}

// newNodeHost describes node-<i>'s host side: its pool holds i GiB, so the nodes' capacities
// differ and a claim can be too large for some nodes but not for others.
func newNodeHost(name string) *nodeHost {
	dir := filepath.Join(nodesDir, name, "root", defaultHostDir)
	i, err := strconv.Atoi(strings.TrimPrefix(name, "node-"))
	if err != nil || i < 1 {
		i = 1
	}
	return &nodeHost{name: name, dir: dir, poolDir: filepath.Join(dir, "pool"), poolBytes: int64(i) << 30}
}

// capacity is what the node's driver offers for new volumes: its pool less the reserve.
func (h *nodeHost) capacity() int64 { return h.poolBytes - reserveBytes }

// nodeNames lists the cluster's nodes by name.
func (e *environment) nodeNames() ([]string, error) {
	var nodes list[node]
	if err := e.getJSON(&nodes, "nodes"); err != nil {
		return nil, fmt.Errorf("cluster not reachable (%s): %w", howToRun, err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Metadata.Name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, errors.New("the cluster has no node")
	}
	return names, nil
}

// prepareNodes mounts each node's pool, a tmpfs mounted here that shows through in the node's
// mount namespace (a slave of this one).
func (e *environment) prepareNodes() error {
	e.hostDir = defaultHostDir // what up.sh binds for each node
	e.poolDir = filepath.Join(e.hostDir, "pool")
	e.stateDir = filepath.Join(e.hostDir, "state")
	for _, n := range e.nodes {
		h := e.multi[n]
		if _, err := os.Stat(h.dir); err != nil {
			return fmt.Errorf("node %s has no host directory (test/e2e/cluster/up.sh makes it): %w", n, err)
		}
		for _, d := range []string{h.poolDir, filepath.Join(h.dir, "state")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", h.poolBytes),
			"csi-fat-e2e-pool-"+n, h.poolDir).CombinedOutput(); err != nil {
			return fmt.Errorf("mount the pool's tmpfs of node %s at %s: %w: %s", n, h.poolDir, err, out)
		}
	}
	return nil
}

// cleanNodes unmounts each node's pool and empties its host directory, which stays: the node's
// mount namespace holds it as a bind mount.
func (e *environment) cleanNodes() error {
	var errs []error
	for _, n := range e.nodes {
		h := e.multi[n]
		if mounted(h.poolDir) {
			if out, err := exec.Command("umount", h.poolDir).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("umount %s: %w: %s", h.poolDir, err, out))
				continue
			}
		}
		entries, err := os.ReadDir(h.dir)
		if err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
		for _, ent := range entries {
			errs = append(errs, os.RemoveAll(filepath.Join(h.dir, ent.Name())))
		}
	}
	return errors.Join(errs...)
}

// imageFileOn is the pool file of an image volume of a node, from its volume handle
// <pool>:<node>:<name>, on this machine.
func (e *environment) imageFileOn(node, handle string) (string, error) {
	pool, rest, _ := strings.Cut(handle, ":")
	nodeID, name, ok := strings.Cut(rest, ":")
	if pool != "image" || !ok || nodeID != node || e.multi[node] == nil {
		return "", fmt.Errorf("volume handle %q: not an image volume of node %s", handle, node)
	}
	return filepath.Join(e.multi[node].poolDir, name+".img"), nil
}
