// Package fsck is a FAT12/16/32 checker (Check, read-only) with a repair of the safe cases
// (Repair). It reads the raw on-disk structures itself (through fatvol/ondisk and
// fatvol/blockdev only, never the engine) so that it can judge the engine's output
// independently, and it follows the rules of dosfstools' fsck.fat 4.2: what fsck.fat -n would
// repair is an error, what it only mentions is a warning.
package fsck

import (
	"fmt"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Kind classifies a problem so that a repair pass can pick its action.
type Kind int

const (
	BootSector         Kind = iota // boot sector fields or geometry
	BackupBootMismatch             // FAT32 backup boot sector differs from the primary
	FATMismatch                    // the FAT copies differ
	FATHeader                      // FAT[0] (media entry) or FAT[1] is wrong
	FSInfo                         // FAT32 FSINFO signatures, free count or next-free hint
	ClusterOutOfRange              // a FAT entry or a start cluster points outside the data area
	ChainCycle                     // a file's cluster chain loops back on itself
	CrossLink                      // two files share clusters
	LostClusters                   // allocated clusters that no file references
	ChainLength                    // chain too long or too short for the file size
	BrokenChain                    // a chain runs into a free or bad cluster
	BadEntry                       // bad short name, attributes, size, start of a directory entry
	DotEntries                     // '.' / '..' missing or wrong in a subdirectory
	OrphanLFN                      // long-name entries not followed by their short entry
	LFNChecksum                    // long-name checksum does not match the short name
	LFNOrder                       // long-name entries out of sequence or unfinished
	DuplicateName                  // two entries of a directory have the same short name
	Label                          // volume label in the boot sector and root directory disagree or are invalid
	Dirty                          // the volume was not cleanly unmounted
	Limit                          // the checker stopped short of something (hostile sizes)
	InterruptedRename              // two names of one file, the new one marked: a rename a crash cut short
)

var kindNames = [...]string{
	BootSector:         "BootSector",
	BackupBootMismatch: "BackupBootMismatch",
	FATMismatch:        "FATMismatch",
	FATHeader:          "FATHeader",
	FSInfo:             "FSInfo",
	ClusterOutOfRange:  "ClusterOutOfRange",
	ChainCycle:         "ChainCycle",
	CrossLink:          "CrossLink",
	LostClusters:       "LostClusters",
	ChainLength:        "ChainLength",
	BrokenChain:        "BrokenChain",
	BadEntry:           "BadEntry",
	DotEntries:         "DotEntries",
	OrphanLFN:          "OrphanLFN",
	LFNChecksum:        "LFNChecksum",
	LFNOrder:           "LFNOrder",
	DuplicateName:      "DuplicateName",
	Label:              "Label",
	Dirty:              "Dirty",
	Limit:              "Limit",
	InterruptedRename:  "InterruptedRename",
}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Severity tells whether a problem makes the volume unclean.
type Severity int

const (
	// Error: fsck.fat -n would change something (it exits non-zero).
	Error Severity = iota
	// Warning: fsck.fat only mentions it (backup boot sector differences, unfixed long-name
	// inconsistencies, an unknown FSINFO free count), or fsck.fat does not look at it at all.
	Warning
)

func (s Severity) String() string {
	if s == Warning {
		return "warning"
	}
	return "error"
}

// Problem is one finding, with what a repair pass needs to act on it.
type Problem struct {
	Kind     Kind
	Severity Severity
	// Path is the file or directory concerned, "/"-separated from the root ("/" is the root
	// itself); empty for volume-wide problems (boot sector, FAT, FSINFO, lost clusters).
	Path        string
	Detail      string // human text
	Cluster     uint32 // the cluster involved (for chain problems: the one whose FAT entry a repair would change); 0 if none
	EntryOffset int64  // byte offset of the directory entry on the device, -1 if none
	// Repairable tells whether Repair fixes this error safely; always false for warnings.
	Repairable bool
}

// repairableKinds are the kinds of error Repair fixes, as fsck.fat -a would, without risk to
// any file's data: what a crash of a writer leaves (lost clusters, a stale free count, the
// dirty bit, FAT copies half written, a size and chain out of step).
var repairableKinds = map[Kind]bool{
	LostClusters: true,
	FSInfo:       true,
	Dirty:        true,
	FATMismatch:  true,
	ChainLength:  true,
	// The marked new name is kept and the old entry removed, as the engine does at open.
	InterruptedRename: true,
	// What a cut leaves of a name whose entries cross sectors: deleted, as fsck.fat deletes them.
	OrphanLFN: true,
}

func (p Problem) String() string {
	prefix := ""
	if p.Severity == Warning {
		prefix = "warning: "
	}
	if p.Path == "" {
		return prefix + p.Detail
	}
	return p.Path + ": " + prefix + p.Detail
}

// Report is the outcome of a check.
type Report struct {
	Problems []Problem
	// Omitted counts problems found after the first maxProblems, which are not listed.
	Omitted int
	// omittedErrors tells whether any omitted problem was an error.
	omittedErrors bool
	Type          ondisk.FATType
	// Files counts every non-directory entry (volume labels too) and Dirs every directory
	// except the root, so Files+Dirs is fsck.fat's "N files".
	Files, Dirs int
	// Clusters is the number of data clusters; Used = Clusters - Free, where Free counts the
	// clusters no file owns and not marked bad (fsck.fat's notion, so lost clusters count
	// as free).
	Clusters                                 uint32
	UsedClusters, FreeClusters, LostClusters uint32
}

// Clean tells whether the check found no errors (warnings do not count), which is when
// fsck.fat -n exits 0.
func (r *Report) Clean() bool {
	if r.omittedErrors {
		return false
	}
	for _, p := range r.Problems {
		if p.Severity == Error {
			return false
		}
	}
	return true
}

// Errors returns the problems of severity Error.
func (r *Report) Errors() []Problem {
	var out []Problem
	for _, p := range r.Problems {
		if p.Severity == Error {
			out = append(out, p)
		}
	}
	return out
}

// Unrepairable returns the errors Repair does not fix.
func (r *Report) Unrepairable() []Problem {
	var out []Problem
	for _, p := range r.Problems {
		if p.Severity == Error && !p.Repairable {
			out = append(out, p)
		}
	}
	return out
}

// Has tells whether the report lists a problem of kind k (of any severity).
func (r *Report) Has(k Kind) bool {
	for _, p := range r.Problems {
		if p.Kind == k {
			return true
		}
	}
	return false
}
