package layout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// What a span of a medium holds, by signature, named as blkid's TYPE names it.
const (
	TypeFAT   = "vfat"
	TypeExFAT = "exfat"
	TypeNTFS  = "ntfs"
	TypeExt2  = "ext2"
	TypeExt3  = "ext3"
	TypeExt4  = "ext4"
	TypeISO   = "iso9660"
	TypeLUKS  = "crypto_LUKS"
	TypeLVM   = "LVM2_member"
	TypeSwap  = "swap"
)

var typeNames = map[string]string{
	TypeFAT: "a FAT file system", TypeExFAT: "an exFAT file system", TypeNTFS: "an NTFS file system",
	TypeExt2: "an ext2 file system", TypeExt3: "an ext3 file system", TypeExt4: "an ext4 file system",
	TypeISO: "an ISO 9660 file system", TypeLUKS: "a LUKS encrypted volume", TypeLVM: "an LVM2 physical volume",
	TypeSwap: "Linux swap",
}

// Signature is a file system or volume signature found at some offset of a medium.
type Signature struct {
	Type  string // blkid's TYPE: vfat, exfat, ntfs, ext4, iso9660, crypto_LUKS, LVM2_member, swap, ...
	Label string // where the format has one and it is set
}

func (s Signature) String() string {
	n := typeNames[s.Type]
	if s.Label != "" {
		n += fmt.Sprintf(" labelled %q", s.Label)
	}
	return n
}

// ext superblock features that ext3 does not know: their presence makes ext4 (libblkid's rule).
const (
	extCompatJournal      = 0x0004
	extIncompatExt3Known  = 0x0002 | 0x0004 | 0x0010 // filetype, recover, meta_bg
	extROCompatExt3Known  = 0x0001 | 0x0002 | 0x0004 // sparse_super, large_file, btree_dir
	extIncompatJournalDev = 0x0008
)

// sigRead is one span a probe reads: relative offset and length.
type sigRead struct{ off, n int64 }

// ProbeAt names the file system or volume signature at byte off of m (a partition's start, or
// 0), reading only the few spans the signatures need: the first 4 KiB (FAT, exFAT, NTFS, LUKS,
// LVM2's label in one of the first four sectors, the ext superblock 1 KiB in, the swap signature
// at the end of a 4 KiB page), the last bytes of larger pages (swap) and 2 KiB at 32 KiB (ISO
// 9660). ok is false when none matches.
func ProbeAt(m Medium, off, size int64) (sig Signature, ok bool, err error) {
	read := func(rel, n int64) ([]byte, error) {
		if rel+n > size {
			return nil, nil
		}
		p := make([]byte, n)
		if err := readFull(m, p, off+rel); err != nil {
			return nil, err
		}
		return p, nil
	}
	if size < 512 {
		return sig, false, nil
	}
	head, err := read(0, min(size, 4096))
	if err != nil {
		return sig, false, err
	}
	switch {
	case bytes.HasPrefix(head, []byte("LUKS\xba\xbe")):
		label := ""
		if binary.BigEndian.Uint16(head[6:]) == 2 && len(head) >= 0x118 {
			label = cstring(head[0x18:0x48])
		}
		return Signature{Type: TypeLUKS, Label: label}, true, nil
	case string(head[3:11]) == "EXFAT   ":
		return Signature{Type: TypeExFAT}, true, nil
	case string(head[3:11]) == "NTFS    ":
		return Signature{Type: TypeNTFS}, true, nil
	}
	for s := 0; s < 4 && (s+1)*512 <= len(head); s++ {
		if string(head[s*512:s*512+8]) == "LABELONE" && string(head[s*512+24:s*512+32]) == "LVM2 001" {
			return Signature{Type: TypeLVM}, true, nil
		}
	}
	if IsFATBootSector(head) {
		return Signature{Type: TypeFAT, Label: fatLabel(head)}, true, nil
	}
	if len(head) >= 2048 && binary.LittleEndian.Uint16(head[1024+56:]) == 0xEF53 {
		return Signature{Type: extType(head[1024:2048]), Label: cstring(head[1024+120 : 1024+136])}, true, nil
	}
	for _, page := range []int64{4096, 8192, 16384, 65536} {
		if page <= int64(len(head)) {
			if t := string(head[page-10 : page]); t == "SWAPSPACE2" || t == "SWAP-SPACE" {
				return Signature{Type: TypeSwap, Label: swapLabel(head)}, true, nil
			}
			continue
		}
		p, err := read(page-10, 10)
		if err != nil {
			return sig, false, err
		}
		if t := string(p); p != nil && (t == "SWAPSPACE2" || t == "SWAP-SPACE") {
			return Signature{Type: TypeSwap}, true, nil
		}
	}
	if p, err := read(32768, 2048); err != nil {
		return sig, false, err
	} else if p != nil && string(p[1:6]) == "CD001" {
		return Signature{Type: TypeISO, Label: strings.TrimRight(string(p[40:72]), " ")}, true, nil
	}
	return sig, false, nil
}

// extType tells ext2, ext3 and ext4 apart from the superblock's features, as libblkid does: any
// feature ext3 lacks makes ext4, a journal without them ext3.
func extType(sb []byte) string {
	le := binary.LittleEndian
	compat, incompat, rocompat := le.Uint32(sb[92:]), le.Uint32(sb[96:]), le.Uint32(sb[100:])
	switch {
	case incompat&^(extIncompatExt3Known|extIncompatJournalDev) != 0 || rocompat&^extROCompatExt3Known != 0:
		return TypeExt4
	case compat&extCompatJournal != 0:
		return TypeExt3
	}
	return TypeExt2
}

// fatLabel is the boot sector's label, "" for none.
func fatLabel(bs []byte) string {
	off := 43 // FAT12/16 extended boot record
	if binary.LittleEndian.Uint16(bs[22:]) == 0 {
		off = 71 // FAT32
	}
	if bs[off-5] != 0x29 {
		return ""
	}
	l := strings.TrimRight(string(bs[off:off+11]), " ")
	if l == "NO NAME" {
		return ""
	}
	return l
}

// swapLabel reads the label of a version 1 swap header (1 KiB in, after the boot block).
func swapLabel(head []byte) string {
	if len(head) < 1024+44 {
		return ""
	}
	return cstring(head[1024+28 : 1024+44])
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}

// Report is what a medium holds, as Probe finds it.
type Report struct {
	Layout *Layout
	// FAT is the partition Find would serve (number 0 for the whole medium), when Usable.
	FAT    Partition
	Usable bool
	// Whole is the signature found on the whole medium when it is not a FAT one (a file system
	// or volume without a partition table, or an ISO 9660 image with a hybrid table).
	Whole *Signature
	// Reason says what the medium holds and why it is not a FAT volume; "" when Usable.
	Reason string
	// Blank: no table, no signature, and its first 32 KiB are zero (a new or zeroed medium).
	Blank bool
}

// ErrNotUsable is wrapped by Report.Err.
var ErrNotUsable = errors.New("not a FAT volume")

// Err is nil for a usable medium, else an error with the reason.
func (r *Report) Err() error {
	if r.Usable {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNotUsable, r.Reason)
}

// Probe names what m holds: a FAT volume (a superfloppy, or a partition Find would serve), or
// why it is not one: another file system or volume on the whole medium (exFAT, NTFS, ext2/3/4,
// ISO 9660 with or without a hybrid partition table, LUKS, an LVM2 physical volume, swap), a
// partition table with no FAT partition (each partition named with what it holds), a
// table that cannot be trusted, or nothing recognised at all. It reads only sector 0, the table's
// sectors and the few sectors each signature needs.
func Probe(m Medium) (*Report, error) {
	r := &Report{}
	l, lerr := Read(m)
	r.Layout = l
	if lerr == nil && l.Kind != Unknown {
		if p, _, err := Find(m, ""); err == nil {
			r.FAT, r.Usable = p, true
			return r, nil
		}
	}
	r.Whole, r.Reason = whyNotFAT(m, l, lerr)
	r.Blank = r.Whole == nil && lerr == nil && l.Kind == Unknown && allZero(m)
	return r, nil
}

// whyNotFAT says what m holds when Find found no FAT file system on it (l and lerr are what Read
// returned), and the signature on the whole medium if there is one.
func whyNotFAT(m Medium, l *Layout, lerr error) (*Signature, string) {
	sig, ok, err := ProbeAt(m, 0, m.Size())
	if err != nil {
		return nil, fmt.Sprintf("it cannot be read: %v", err)
	}
	if ok && sig.Type != TypeFAT {
		reason := "it holds " + sig.String()
		if kind := tableKind(m); kind != Unknown {
			reason += fmt.Sprintf(" with a hybrid %s partition table", kind)
		}
		return &sig, reason
	}
	switch {
	case lerr != nil:
		return nil, lerr.Error()
	case l.Kind == MBR || l.Kind == GPT:
		return nil, "it has " + Describe(m, l) + ", and no FAT partition"
	case allZero(m):
		return nil, "it is blank: no partition table and no file system signature in its first sectors"
	}
	return nil, "it holds no partition table and no file system signature this driver knows"
}

// tableKind tells whether sector 0 looks like a partition table (0x55AA, valid boot indicators,
// at least one used entry), trusted or not: hybrid ISO images carry one whose first partition
// starts at sector 0 and spans the image.
func tableKind(m Medium) Kind {
	s, err := readSector(m, 0, m.LogicalBlockSize())
	if err != nil || !ondisk.HasSignature(s) || !validBootIndicators(s) {
		return Unknown
	}
	for _, e := range mbrEntries(s) {
		if e.size != 0 {
			if hasProtectiveEntry(s) {
				return GPT
			}
			return MBR
		}
	}
	return Unknown
}

// allZero tells whether the first 32 KiB of m (or all of it, when smaller) are zero.
func allZero(m Medium) bool {
	p := make([]byte, min(m.Size(), 32<<10))
	if err := readFull(m, p, 0); err != nil {
		return false
	}
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

// KnownType tells whether t is one of the signature types ProbeAt names.
func KnownType(t string) bool {
	_, ok := typeNames[t]
	return ok
}
