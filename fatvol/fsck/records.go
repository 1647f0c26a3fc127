package fsck

import (
	"unsafe"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// fileRec is one directory entry found during the walk. Index 0 is the root directory. It is
// kept small (64 bytes) and holds no pointer: a volume's every entry stays in memory for the
// whole check, and the collector need not scan them.
type fileRec struct {
	entryOff int64 // device offset of the short entry; -1 for the root
	parent   int32 // index of the containing directory; -1 for the root
	start    uint32
	size     uint32
	// pair: 1 + the index of the other name of the same file when the two are an interrupted
	// rename, 0 when not.
	pair    int32
	name    uint32 // where its name is in the records' name arena
	nameLen uint16
	short   ondisk.ShortName
	stamps  [11]byte // creation and modification times and access date (bytes 13-19, 22-25)
	attr    uint8
	ntCase  uint8
	lfnN    uint8 // long-name entries: those just before the entry, unless records.lfnSplit has them
	hasLFN  bool
	deleted bool // fsck.fat would delete it: it is not descended into
	// entryChanged: the check changed start or size in memory as fsck.fat would on disk.
	entryChanged bool
	badName      bool
	renameNew    bool // the entry carries ondisk.RenameNew
}

func (f *fileRec) isDir() bool { return f.attr&ondisk.AttrDirectory != 0 }

// Chunk sizes of the records' storage: growing by whole chunks, the storage never holds two
// copies of itself as a doubling slice does while it grows.
const (
	recordChunk = 1 << 12 // records
	nameChunk   = 1 << 18 // bytes of names
	// maxNameBytes bounds the name arena (positions are 32-bit): names average far below what
	// maxRecords entries of this many bytes would take.
	maxNameBytes = 1<<32 - nameChunk
)

// records holds the directory entries of a check and their names.
type records struct {
	chunks [][]fileRec
	n      int32
	names  [][]byte // each nameChunk long; a name never straddles two
	used   uint32   // bytes of the name arena taken, counting the unused tails of full chunks
	// lfnSplit holds the offsets of long names whose entries do not run contiguously on the
	// device up to their short entry (a name that crosses from one cluster into another that
	// does not follow it): by record index.
	lfnSplit   map[int32][]int64
	splitBytes int64 // what lfnSplit takes, about: counted as it grows, since bytes is asked at every entry
}

func (r *records) len() int32 { return r.n }

// at is the record of index i.
func (r *records) at(i int32) *fileRec { return &r.chunks[i/recordChunk][i%recordChunk] }

// bytes is the memory the records and their names take.
func (r *records) bytes() int64 {
	return int64(len(r.chunks))*recordChunk*int64(unsafe.Sizeof(fileRec{})) + int64(len(r.names))*nameChunk + r.splitBytes
}

// add appends f, with name and its long-name entries' offsets; it returns its index, or -1 when
// the name arena is full.
func (r *records) add(f fileRec, name string, lfnOffs []int64) int32 {
	pos, ok := r.addName(name)
	if !ok {
		return -1
	}
	f.name, f.nameLen = pos, uint16(len(name))
	i := r.n
	if len(lfnOffs) > 0 {
		f.lfnN = uint8(len(lfnOffs))
		for k, off := range lfnOffs {
			if off != f.entryOff-int64(len(lfnOffs)-k)*ondisk.DirEntrySize {
				if r.lfnSplit == nil {
					r.lfnSplit = map[int32][]int64{}
				}
				r.lfnSplit[i] = append([]int64(nil), lfnOffs...)
				r.splitBytes += 8*int64(len(lfnOffs)) + 48
				break
			}
		}
	}
	if int(i/recordChunk) == len(r.chunks) {
		r.chunks = append(r.chunks, make([]fileRec, recordChunk))
	}
	r.chunks[i/recordChunk][i%recordChunk] = f
	r.n++
	return i
}

// addName stores name in the arena and returns its position.
func (r *records) addName(name string) (uint32, bool) {
	n := uint64(len(name))
	if n > nameChunk {
		return 0, false
	}
	pos := uint64(r.used)
	if off := pos % nameChunk; off+n > nameChunk {
		pos += nameChunk - off // the tail of the chunk stays unused
	}
	if pos+n > maxNameBytes {
		return 0, false
	}
	if n > 0 && int(pos/nameChunk) == len(r.names) {
		r.names = append(r.names, make([]byte, nameChunk))
	}
	if n > 0 {
		copy(r.names[pos/nameChunk][pos%nameChunk:], name)
	}
	r.used = uint32(pos + n)
	return uint32(pos), true
}

// name is the name of f: its long name, else its short name as displayed.
func (r *records) name(f *fileRec) string {
	if f.nameLen == 0 {
		return ""
	}
	c := r.names[f.name/nameChunk]
	off := f.name % nameChunk
	return string(c[off : off+uint32(f.nameLen)])
}

// lfnOffsets are the device offsets of the long-name entries of record i.
func (r *records) lfnOffsets(i int32) []int64 {
	if offs, ok := r.lfnSplit[i]; ok {
		return offs
	}
	f := r.at(i)
	out := make([]int64, f.lfnN)
	for k := range out {
		out[k] = f.entryOff - int64(len(out)-k)*ondisk.DirEntrySize
	}
	return out
}
