package protocol

// The probe of a removable medium (`csi-fat probe-medium`, package mounter's ProbeMain) answers
// on its standard output with one ProbeAnswer as JSON: what layout.Probe found, reduced to what
// the node plugin uses. The plugin reads at most MaxProbeAnswer bytes and checks every field
// (node/prober): the prober parses an untrusted medium, so its answer is untrusted too.

// MaxProbeAnswer bounds the probe's answer; a longer one is refused. A table of
// MaxProbeEntries partitions with long GPT names fits.
const MaxProbeAnswer = 1 << 20

// MaxProbeEntries bounds the partitions an answer lists; the probe answers a table with more
// with an error.
const MaxProbeEntries = 1024

// MaxProbeReason bounds the reason and error strings of an answer, in bytes. The prober cuts
// longer ones (a GPT of thousands of partitions describes each); the plugin refuses none, it cuts
// again.
const MaxProbeReason = 1024

// MaxProbePartition is the highest partition number a table read by fatvol/layout can have: the
// largest GPT entry array it reads (1 MiB of 128-byte entries).
const MaxProbePartition = 8192

// Table kinds of a ProbeAnswer: layout.Kind's String, or ProbeTableInvalid when the table could
// not be trusted (layout.Read failed).
const (
	ProbeTableUnknown     = "unknown"
	ProbeTableSuperfloppy = "superfloppy"
	ProbeTableMBR         = "MBR"
	ProbeTableGPT         = "GPT"
	ProbeTableInvalid     = "invalid"
)

// ProbeAnswer is what a medium holds, as the probe found it.
type ProbeAnswer struct {
	// Usable: it holds FAT, in FAT (the whole medium for partition 0).
	Usable bool            `json:"usable"`
	FAT    *ProbePartition `json:"fat,omitempty"`
	// Blank: no table, no signature, and its first 32 KiB are zero.
	Blank bool `json:"blank"`
	// Table is the partition table's kind (the ProbeTable constants).
	Table string `json:"table"`
	// Whole is the blkid TYPE of a signature on the whole medium that is not FAT, or "".
	Whole string `json:"whole,omitempty"`
	// Reason says what it holds and why it is not a FAT volume; "" when Usable.
	Reason string `json:"reason,omitempty"`
	// Partitions are the partitions of an MBR or GPT table, in the table's order, each with the
	// signature found at its start.
	Partitions []ProbeTableEntry `json:"partitions,omitempty"`
	// Error says why the medium could not be read; the other fields are then empty.
	Error string `json:"error,omitempty"`
}

// ProbeTableEntry is one partition of a table (layout.Partition) and what its start holds.
type ProbeTableEntry struct {
	Number   int    `json:"number"`
	Start    int64  `json:"start"`
	Size     int64  `json:"size"`
	MBRType  uint8  `json:"mbrType,omitempty"`
	TypeGUID string `json:"typeGUID,omitempty"`
	GUID     string `json:"guid,omitempty"`
	Name     string `json:"name,omitempty"`
	// Signature is the blkid TYPE of the signature at the partition's start, or "".
	Signature string `json:"signature,omitempty"`
}

// ProbePartition is where the FAT file system of a usable medium lies.
type ProbePartition struct {
	Number int   `json:"number"` // 0 for the whole medium
	Start  int64 `json:"start"`  // bytes
	Size   int64 `json:"size"`   // bytes
}
