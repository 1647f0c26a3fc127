package layout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"unicode/utf16"
)

// The GPT header's fields (UEFI 2.10, 5.3.2) and the limits Linux's efi.c enforces.
const (
	gptSignature     = "EFI PART"
	gptMinHeaderSize = 92
	gptEntrySize     = 128 // Linux accepts no other size
	// maxGPTEntryBytes bounds the entry array read (the usual array is 16 KiB): a larger count
	// is taken as hostile rather than read.
	maxGPTEntryBytes = 1 << 20
)

// gptHeader is the part of a GPT header the reader uses.
type gptHeader struct {
	myLBA, firstUsable, lastUsable, entriesLBA uint64
	diskGUID                                   string
	entries, entrySize, entriesCRC             uint32
}

// readGPT reads the primary GPT (header at sector 1) and, when the primary header or its entry
// array is damaged, the backup at the last sector, as libblkid does (Linux does so only with the
// "gpt" boot option; without it a damaged primary leaves no partitions).
func readGPT(m Medium, l *Layout) error {
	last := l.Size/int64(l.SectorSize) - 1
	h, entries, perr := readGPTAt(m, l, 1, last)
	if perr != nil {
		var berr error
		h, entries, berr = readGPTAt(m, l, last, last)
		if berr != nil {
			return fmt.Errorf("layout: protective MBR but no valid GPT: primary: %v; backup: %v: %w", perr, berr, ErrInvalidTable)
		}
		l.BackupGPT = true
	}
	l.DiskID = h.diskGUID
	var xs []extent
	for i := 0; i < int(h.entries); i++ {
		e := entries[i*int(h.entrySize):][:gptEntrySize]
		typ := decodeGUID(e[0:16])
		if typ == zeroGUID {
			continue
		}
		num := i + 1
		first, lastLBA := binary.LittleEndian.Uint64(e[32:]), binary.LittleEndian.Uint64(e[40:])
		if first > lastLBA || first < h.firstUsable || lastLBA > h.lastUsable {
			return fmt.Errorf("layout: GPT partition %d (sectors %d-%d) is outside the usable sectors %d-%d: %w",
				num, first, lastLBA, h.firstUsable, h.lastUsable, ErrInvalidTable)
		}
		xs = append(xs, extent{int64(first), int64(lastLBA) + 1, fmt.Sprintf("partition %d", num)})
		ss := int64(l.SectorSize)
		l.Partitions = append(l.Partitions, Partition{
			Number: num, Start: int64(first) * ss, Size: (int64(lastLBA) - int64(first) + 1) * ss,
			TypeGUID: typ, GUID: decodeGUID(e[16:32]), Name: decodeName(e[56:128]),
		})
	}
	return checkOverlaps(xs)
}

// readGPTAt reads and validates the header at sector lba and its entry array, by Linux's
// is_gpt_valid: the signature, a header size from 92 bytes to a sector, the header's CRC32, the
// header's own LBA, usable sectors inside the medium, 128-byte entries, and the entries' CRC32.
func readGPTAt(m Medium, l *Layout, lba int64, last int64) (*gptHeader, []byte, error) {
	if lba < 1 || lba > last {
		return nil, nil, fmt.Errorf("header sector %d is not on the medium", lba)
	}
	s, err := readSector(m, lba, l.SectorSize)
	if err != nil {
		return nil, nil, err
	}
	if string(s[0:8]) != gptSignature {
		return nil, nil, fmt.Errorf("no GPT signature at sector %d", lba)
	}
	le := binary.LittleEndian
	hsize := le.Uint32(s[12:])
	if hsize < gptMinHeaderSize || int64(hsize) > int64(l.SectorSize) {
		return nil, nil, fmt.Errorf("GPT header at sector %d: header size %d is not from %d to %d", lba, hsize, gptMinHeaderSize, l.SectorSize)
	}
	want := le.Uint32(s[16:])
	hdr := bytes.Clone(s[:hsize])
	clear(hdr[16:20])
	if got := crc32.ChecksumIEEE(hdr); got != want {
		return nil, nil, fmt.Errorf("GPT header at sector %d: CRC32 %08x, the header says %08x", lba, got, want)
	}
	h := &gptHeader{
		myLBA: le.Uint64(s[24:]), firstUsable: le.Uint64(s[40:]), lastUsable: le.Uint64(s[48:]),
		diskGUID: decodeGUID(s[56:72]), entriesLBA: le.Uint64(s[72:]), entries: le.Uint32(s[80:]), entrySize: le.Uint32(s[84:]),
		entriesCRC: le.Uint32(s[88:]),
	}
	switch {
	case h.myLBA != uint64(lba):
		return nil, nil, fmt.Errorf("GPT header at sector %d says it is at sector %d", lba, h.myLBA)
	case h.firstUsable > uint64(last) || h.lastUsable > uint64(last) || h.lastUsable < h.firstUsable:
		return nil, nil, fmt.Errorf("GPT header at sector %d: usable sectors %d-%d are not inside the medium's %d sectors", lba, h.firstUsable, h.lastUsable, last+1)
	case h.entrySize != gptEntrySize:
		return nil, nil, fmt.Errorf("GPT header at sector %d: entry size %d, want %d", lba, h.entrySize, gptEntrySize)
	case uint64(h.entries)*gptEntrySize > maxGPTEntryBytes:
		return nil, nil, fmt.Errorf("GPT header at sector %d: %d entries is more than %d bytes of entries", lba, h.entries, maxGPTEntryBytes)
	case h.entries == 0:
		return nil, nil, fmt.Errorf("GPT header at sector %d: no entries", lba)
	}
	n := int64(h.entries) * gptEntrySize
	if h.entriesLBA > uint64(last) || h.entriesLBA == uint64(lba) {
		return nil, nil, fmt.Errorf("GPT header at sector %d: entries at sector %d are not on the medium", lba, h.entriesLBA)
	}
	entries := make([]byte, n)
	if err := readFull(m, entries, int64(h.entriesLBA)*int64(l.SectorSize)); err != nil {
		if errors.Is(err, ErrInvalidTable) {
			return nil, nil, fmt.Errorf("GPT header at sector %d: %d entries at sector %d run past the end of the medium", lba, h.entries, h.entriesLBA)
		}
		return nil, nil, err
	}
	if got := crc32.ChecksumIEEE(entries); got != h.entriesCRC {
		return nil, nil, fmt.Errorf("GPT entries at sector %d: CRC32 %08x, the header at sector %d says %08x", h.entriesLBA, got, lba, h.entriesCRC)
	}
	return h, entries, nil
}

const zeroGUID = "00000000-0000-0000-0000-000000000000"

// decodeGUID prints a GUID in its canonical upper-case form: the first three fields are stored
// little-endian, the last two as bytes.
func decodeGUID(b []byte) string {
	le := binary.LittleEndian
	return fmt.Sprintf("%08X-%04X-%04X-%X-%X", le.Uint32(b[0:]), le.Uint16(b[4:]), le.Uint16(b[6:]), b[8:10], b[10:16])
}

// decodeName reads a GPT partition name: UTF-16LE, up to 36 units, NUL-terminated.
func decodeName(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}
