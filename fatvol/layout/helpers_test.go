package layout

import (
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// memMedium is a medium held in memory, as the fuzz target and the hand-built tables use.
type memMedium struct {
	b  []byte
	ss int
}

func (m memMedium) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(m.b)) {
		return 0, os.ErrInvalid
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, os.ErrInvalid
	}
	return n, nil
}
func (m memMedium) Size() int64           { return int64(len(m.b)) }
func (m memMedium) LogicalBlockSize() int { return m.ss }

// setMBREntry writes MBR entry i (0-3) of the sector at s.
func setMBREntry(s []byte, i int, boot, typ byte, start, size uint32) {
	p := s[mbrTableOffset+i*mbrEntrySize:]
	p[0], p[4] = boot, typ
	binary.LittleEndian.PutUint32(p[8:], start)
	binary.LittleEndian.PutUint32(p[12:], size)
	s[510], s[511] = 0x55, 0xAA
}

// gptPart is one entry of a GPT built by writeGPT.
type gptPart struct {
	typ         string // canonical GUID
	first, last uint64
}

func encodeGUID(s string) []byte {
	h := strings.ReplaceAll(s, "-", "")
	b := make([]byte, 16)
	for i := range 16 {
		v, _ := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		b[i] = byte(v)
	}
	// The first three fields are little-endian.
	b[0], b[1], b[2], b[3] = b[3], b[2], b[1], b[0]
	b[4], b[5] = b[5], b[4]
	b[6], b[7] = b[7], b[6]
	return b
}

// writeGPT writes a protective MBR, a primary and a backup GPT with 128 entries into img
// (512-byte sectors), with correct CRCs; hdr may change each header before its CRC is taken.
func writeGPT(img []byte, parts []gptPart, hdr func(h []byte, primary bool)) {
	last := uint64(len(img)/512 - 1)
	setMBREntry(img[:512], 0, 0, 0xEE, 1, uint32(min(last, 0xFFFFFFFF)))
	entries := make([]byte, 128*128)
	for i, p := range parts {
		e := entries[i*128:]
		copy(e[0:], encodeGUID(p.typ))
		copy(e[16:], encodeGUID("11111111-2222-3333-4444-"+strings.Repeat("0", 11)+strconv.Itoa(i+1)))
		binary.LittleEndian.PutUint64(e[32:], p.first)
		binary.LittleEndian.PutUint64(e[40:], p.last)
	}
	copy(img[2*512:], entries)
	copy(img[(last-32)*512:], entries)
	for _, primary := range []bool{true, false} {
		h := make([]byte, 512)
		copy(h, gptSignature)
		binary.LittleEndian.PutUint32(h[8:], 0x00010000)
		binary.LittleEndian.PutUint32(h[12:], 92)
		my, alt, ent := uint64(1), last, uint64(2)
		if !primary {
			my, alt, ent = last, 1, last-32
		}
		binary.LittleEndian.PutUint64(h[24:], my)
		binary.LittleEndian.PutUint64(h[32:], alt)
		binary.LittleEndian.PutUint64(h[40:], 34)
		binary.LittleEndian.PutUint64(h[48:], last-33)
		copy(h[56:], encodeGUID("AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE"))
		binary.LittleEndian.PutUint64(h[72:], ent)
		binary.LittleEndian.PutUint32(h[80:], 128)
		binary.LittleEndian.PutUint32(h[84:], 128)
		binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(entries))
		if hdr != nil {
			hdr(h, primary)
		}
		hs := binary.LittleEndian.Uint32(h[12:])
		clear(h[16:20])
		if hs >= 20 && hs <= 512 {
			binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:hs]))
		}
		copy(img[my*512:], h)
	}
}

// sfdiskImage makes a sparse image of size bytes and partitions it with sfdisk's script.
func sfdiskImage(tb testing.TB, size int64, script string) string {
	tb.Helper()
	testenv.RequireTool(tb, "sfdisk")
	img := filepath.Join(tb.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("sfdisk", "--no-reread", "--no-tell-kernel", "-q", img)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("sfdisk %s: %v\n%s\nscript:\n%s", img, err, out, script)
	}
	return img
}

// sfdiskTable is what sfdisk --json reports of a table.
type sfdiskTable struct {
	Label      string `json:"label"`
	ID         string `json:"id"`
	SectorSize int    `json:"sectorsize"`
	Partitions []struct {
		Node  string `json:"node"`
		Start int64  `json:"start"`
		Size  int64  `json:"size"`
		Type  string `json:"type"`
		UUID  string `json:"uuid"`
		Name  string `json:"name"`
	} `json:"partitions"`
}

func sfdiskDump(tb testing.TB, img string) sfdiskTable {
	tb.Helper()
	out, err := exec.Command("sfdisk", "--json", img).Output()
	if err != nil {
		tb.Fatalf("sfdisk --json %s: %v", img, err)
	}
	var v struct {
		PartitionTable sfdiskTable `json:"partitiontable"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		tb.Fatalf("sfdisk --json %s: %v\n%s", img, err, out)
	}
	return v.PartitionTable
}

// readImage reads the layout of an image file.
func readImage(tb testing.TB, img string) (*Layout, error) {
	tb.Helper()
	dev, err := blockdev.Open(img, true)
	if err != nil {
		tb.Fatal(err)
	}
	defer dev.Close()
	return Read(dev)
}
