package mounter

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// A mounter pod's memory limit is its overhead plus the volume's cache size. The engine's page
// buffers (CacheBytes at most) live outside the Go heap, and the binary's mapped pages and the
// runtime's own are counted by the cgroup but not by the Go runtime: the runtime's limit is the
// bound less those, so that the collector works harder as the heap nears it, rather than the pod
// being killed with garbage in its heap; and the FUSE server keeps the nodes of the files the
// kernel knows within a quarter of that limit (fatfuse.Server.SetNodeBudget), and the engine the
// directories it has read within an eighth (fatvol.Options.DirCacheBytes), so that a walk of a
// volume of any file count does not make it grow without end.

// nonGoReserve is what a mounter's resident memory holds beside what the Go runtime counts and
// the engine's page buffers: the binary's mapped text and data, and slack.
const nonGoReserve = 24 << 20

// goMemoryLimit is the Go runtime's memory limit for a mounter held to bound bytes whose engine
// may hold cache bytes of page buffers: never below a quarter of the bound, where the collector
// would run without end for nothing.
func goMemoryLimit(bound, cache int64) int64 {
	return max(bound-cache-nonGoReserve, bound/4)
}

// nodeBytes is what the server holds for each file or directory the kernel knows, with the
// collector's slack: measured at 534 bytes live (go-fuse's inode, fatfuse's node, their entries
// in the tables).
const nodeBytes = 1 << 10

// nodeBudget is how many such nodes a mounter held to bound may keep (fatfuse's node budget): a
// quarter of its Go runtime's limit; 0 for no bound.
func nodeBudget(bound, cache int64) int {
	if bound <= 0 {
		return 0
	}
	return int(goMemoryLimit(bound, cache) / 4 / nodeBytes)
}

// dirCacheBytes is what the engine of a mounter held to bound may keep of the directories it
// has read: an eighth of its Go runtime's limit (17 MiB with the chart's defaults); 0 for no
// bound, which leaves the engine's default.
func dirCacheBytes(bound, cache int64) int64 {
	if bound <= 0 {
		return 0
	}
	return goMemoryLimit(bound, cache) / 8
}

// checkMemory is what the check before serving may hold of a mounter held to bound (0: no
// bound): three quarters of the Go runtime's limit, the rest left to the collector's slack and
// the buffers beside the check's tables.
func checkMemory(bound int64) int64 {
	if bound <= 0 {
		return 0
	}
	return goMemoryLimit(bound, 0) / 4 * 3
}

// HoldServing holds this process, about to serve a volume whose engine may hold cache bytes of
// page buffers, to bound bytes as a mounter is held: it sets the Go runtime's limit, and returns
// the FUSE server's node budget and the engine's directory cache for that bound (0 and 0 for no
// bound). csi-fat mount -memory-limit uses it to serve as a mounter pod would.
func HoldServing(bound, cache int64) (nodes int, dirCache int64) {
	holdMemory(bound, cache)
	return nodeBudget(bound, cache), dirCacheBytes(bound, cache)
}

// holdMemory sets the Go runtime's limit for bound (nothing for 0).
func holdMemory(bound, cache int64) {
	if bound > 0 {
		debug.SetMemoryLimit(goMemoryLimit(bound, cache))
	}
}

// memory reports the process's memory against its bound, and the nodes its server holds.
func (s *Server) memory() *protocol.Memory {
	s.mu.Lock()
	m := &protocol.Memory{Bound: s.bound, NodeBudget: int64(s.nodeBudget)}
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		m.Nodes = int64(srv.Nodes())
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		m.GoLimit = l
	}
	m.Resident = residentBytes()
	return m
}

// residentBytes is the process's resident memory (/proc/self/statm), 0 when it cannot be read.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
