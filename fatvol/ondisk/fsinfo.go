package ondisk

import (
	"encoding/binary"
	"fmt"
)

// FSINFO signatures (fatgen103).
const (
	fsInfoLeadSig   = 0x41615252
	fsInfoStructSig = 0x61417272
	fsInfoTrailSig  = 0xAA550000
)

// Unknown is the FSINFO value for "free count / next free not known".
const Unknown = 0xFFFFFFFF

// FSInfo is FAT32's hint sector: a free-cluster count and where to start looking for free clusters.
// Both are hints; Unknown means not known.
type FSInfo struct {
	FreeCount uint32
	NextFree  uint32
}

// ParseFSInfo decodes an FSINFO sector, checking its three signatures.
func ParseFSInfo(p []byte) (FSInfo, error) {
	if len(p) < 512 {
		return FSInfo{}, fmt.Errorf("FSINFO: %d bytes, need 512", len(p))
	}
	le := binary.LittleEndian
	if le.Uint32(p[0:]) != fsInfoLeadSig || le.Uint32(p[484:]) != fsInfoStructSig || le.Uint32(p[508:]) != fsInfoTrailSig {
		return FSInfo{}, fmt.Errorf("FSINFO: bad signature")
	}
	return FSInfo{FreeCount: le.Uint32(p[488:]), NextFree: le.Uint32(p[492:])}, nil
}

// Marshal writes a complete FSINFO sector into p[:512]; the rest of p is left alone.
func (f FSInfo) Marshal(p []byte) {
	le := binary.LittleEndian
	clear(p[:512])
	le.PutUint32(p[0:], fsInfoLeadSig)
	le.PutUint32(p[484:], fsInfoStructSig)
	le.PutUint32(p[488:], f.FreeCount)
	le.PutUint32(p[492:], f.NextFree)
	le.PutUint32(p[508:], fsInfoTrailSig)
}
