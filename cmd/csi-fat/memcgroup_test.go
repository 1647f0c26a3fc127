package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// memCgroup is a memory cgroup of its own that holds a process to a limit, as a pod's limit
// holds its container: cgroup v2 when the unified hierarchy has the memory controller, else
// cgroup v1's memory hierarchy.
type memCgroup struct {
	dir string
	v2  bool
}

// newMemCgroup makes a cgroup limited to limit bytes, without swap, removed at the end of the
// test (its processes must be gone by then).
func newMemCgroup(t *testing.T, name string, limit int64) *memCgroup {
	t.Helper()
	cg := &memCgroup{}
	leaf := fmt.Sprintf("csi-fat-%s-%d", name, os.Getpid())
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && strings.Contains(string(b), "memory") {
		cg.dir, cg.v2 = filepath.Join("/sys/fs/cgroup", leaf), true
	} else if fi, err := os.Stat("/sys/fs/cgroup/memory"); err == nil && fi.IsDir() {
		cg.dir = filepath.Join("/sys/fs/cgroup/memory", leaf)
	} else {
		t.Fatalf("no memory cgroup to hold the server to %d bytes: neither cgroup v2's memory controller nor cgroup v1's memory hierarchy is here", limit)
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Fatalf("memory cgroup: %v (root is needed)", err)
	}
	t.Cleanup(func() { os.Remove(cg.dir) })
	limitFile, swapFile := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
	if cg.v2 {
		limitFile, swapFile = "memory.max", "memory.swap.max"
	}
	cg.write(t, limitFile, strconv.FormatInt(limit, 10))
	if cg.v2 {
		cg.write(t, swapFile, "0")
	} else if _, err := os.Stat(filepath.Join(cg.dir, swapFile)); err == nil {
		cg.write(t, swapFile, strconv.FormatInt(limit, 10))
	}
	return cg
}

func (cg *memCgroup) write(t *testing.T, file, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(value), 0o644); err != nil {
		t.Fatalf("memory cgroup %s: %s: %v", cg.dir, file, err)
	}
}

// add moves the process pid into the cgroup.
func (cg *memCgroup) add(t *testing.T, pid int) { cg.write(t, "cgroup.procs", strconv.Itoa(pid)) }

// peak is the most the cgroup has held (its processes' memory and the page cache charged to
// it), 0 when the kernel does not say.
func (cg *memCgroup) peak() int64 {
	file := "memory.max_usage_in_bytes"
	if cg.v2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// oomKills is how many processes the kernel killed in the cgroup for want of memory.
func (cg *memCgroup) oomKills(t *testing.T) int64 {
	t.Helper()
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		t.Fatalf("memory cgroup: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// residentPeak is a process's peak resident memory (VmHWM), 0 when it cannot be read.
func residentPeak(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			return kib << 10
		}
	}
	return 0
}
