// Package serving is what the node side asks of the engine when the plugin serves volumes in
// its own process (--mounter=inprocess): the interface that package node/inprocess implements
// and package node calls. It stands apart from both so that package node never imports the
// engine: cmd/csi-fat hands node an Engine, and the import lists of the privileged packages
// show that they leave what a medium holds alone. It also holds what serving means whoever
// serves (a mounter or this process): how the check before serving is judged against the
// volume's onDamage policy, and the mount options a staged volume gets.
package serving

import (
	"time"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// Engine checks, reads and serves volumes in this process, as mounters and probers do in
// processes of their own.
type Engine interface {
	// Serve opens a volume's device with open (a.Claim) and serves its file system at
	// a.StagingPath until the mount ends.
	Serve(open func(blockdev.Claim) (*blockdev.File, error), a Args) (Server, error)
	// Check checks the file system in partition of dev ("": the whole of a superfloppy, else
	// the first FAT partition), repairing what is safe with repair and reading every directory
	// with walk, as a mounter's OpCheck does.
	Check(dev blockdev.Device, partition string, repair, walk bool) (*protocol.CheckResult, error)
	// ReadMedium names what a medium holds and lists the partitions of its table that hold
	// FAT, as a prober answers.
	ReadMedium(m layout.Medium) (*layout.Report, []layout.Partition, error)
}

// Args says what to serve and how.
type Args struct {
	ID          string // the volume's ID, as logs and errors name it
	DevicePath  string // the device or image file, the mount's source
	Partition   string // the partition served (volume.Record.Partition)
	StagingPath string
	Claim       blockdev.Claim // the claim staging takes on the device
	Options     mountopt.Options
	Mode        string // the write mode: volume.ModeFlush, ModeSync, or the default
	CacheBytes  int64  // 0: the engine's default
}

// Server is a volume served in this process.
type Server interface {
	// Done is closed when the FUSE mount has ended.
	Done() <-chan struct{}
	// Unmount unmounts the FUSE mount; it fails while the mount is busy.
	Unmount() error
	// Close writes everything back and closes the volume, marking it clean; after Done.
	Close() error
	// Sync writes everything back.
	Sync() error
	// Status fills in st the volume's state as a mounter reports it (mounter.FillStatus), its
	// statfs figures only with stats, file counts too with files.
	Status(st *protocol.Status, stats, files bool)
	// Grow grows the file system to its device's size now, returning its size and whether it
	// grew; a size past what the file system can reach is a *protocol.RemoteError with
	// protocol.CodeGrowLimit, as a mounter answers.
	Grow() (bytes int64, grew bool, err error)
	// Hold writes the volume back and holds every operation on it for a copy, for at most
	// limit; release ends the hold and answers how long it lasted.
	Hold(limit time.Duration) (release func() (time.Duration, error), err error)
	// Memory reports what the server holds as a mounter's OpMemory does, Nodes alone: the
	// process's other figures are the plugin's.
	Memory() *protocol.Memory
}
