package fatfuse

import (
	"os"
	"runtime/debug"

	"github.com/csi-fat/csi-fat/fatvol"
)

// memoryHeadroom is what a process serving one volume may use beside the volume's cache: the
// FUSE request buffers, the FAT, directories, the runtime. With the binary's own pages on top,
// the process stays within the cache bound and 32 MiB.
const memoryHeadroom = 24 << 20

// LimitMemory sets the Go runtime's soft memory limit of a process that serves vol and nothing
// else (csi-fat mount, a mounter) to the volume's cache bound plus headroom, unless GOMEMLIMIT
// says otherwise. The cache's page buffers are live memory, and the collector lets the heap grow
// by as much as is live before it collects: without a limit a 1 GiB copy through a 64 MiB cache
// took the process to 120 MiB. A process serving several volumes must not call it. It returns
// the limit in force.
func LimitMemory(vol *fatvol.Volume) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1)
	}
	limit := vol.Options().CacheBytes + memoryHeadroom
	debug.SetMemoryLimit(limit)
	return limit
}
