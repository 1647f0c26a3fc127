package prober

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// parseAnswer checks a prober's answer for a medium of size bytes and logical block size
// lbs and turns it into what Look would have found: the report's Usable, Blank, Reason,
// FAT (the partition's number, start and size), Whole's type and Layout (its kind and, for a
// table, its partitions; nil for a table that cannot be trusted), and the FAT partitions by
// Look's rule (a FAT type and a FAT signature). Nothing else of the report is set. One
// JSON object with no unknown field, of a known table kind and signature types, partitions and
// the FAT partition inside the medium, numbered in order, not overlapping; the texts are cut and
// cleaned.
func parseAnswer(b []byte, size int64, lbs int) (*Result, error) {
	if len(b) > protocol.MaxProbeAnswer {
		return nil, fmt.Errorf("%d bytes, more than %d", len(b), protocol.MaxProbeAnswer)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var a protocol.ProbeAnswer
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("not a probe answer: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	if a.Error != "" {
		if a.Usable || a.Blank || a.FAT != nil || a.Whole != "" || a.Reason != "" || len(a.Partitions) > 0 {
			return nil, errors.New("an error with a verdict")
		}
		return nil, errors.New(cleanReason(a.Error))
	}
	r := &layout.Report{Usable: a.Usable, Blank: a.Blank, Reason: cleanReason(a.Reason)}
	out := &Result{Report: r}
	kinds := map[string]layout.Kind{protocol.ProbeTableUnknown: layout.Unknown, protocol.ProbeTableSuperfloppy: layout.Superfloppy,
		protocol.ProbeTableMBR: layout.MBR, protocol.ProbeTableGPT: layout.GPT}
	kind, ok := kinds[a.Table]
	if a.Table != protocol.ProbeTableInvalid {
		if !ok {
			return nil, fmt.Errorf("table kind %.40q", a.Table)
		}
		r.Layout = &layout.Layout{Kind: kind, SectorSize: lbs, Size: size}
		if kind == layout.Superfloppy {
			r.Layout.Partitions = []layout.Partition{{Number: 0, Start: 0, Size: size}}
		}
	}
	table := kind == layout.MBR || kind == layout.GPT
	if len(a.Partitions) > 0 && (!table || r.Layout == nil) {
		return nil, fmt.Errorf("partitions in a table of kind %s", a.Table)
	}
	parts, err := checkEntries(a.Partitions, kind, size)
	if err != nil {
		return nil, err
	}
	if table && r.Layout != nil {
		r.Layout.Partitions = parts
		for i, p := range parts {
			if p.IsFATType() && a.Partitions[i].Signature == layout.TypeFAT {
				out.FATPartitions = append(out.FATPartitions, p)
			}
		}
	}
	if a.Whole != "" {
		if !layout.KnownType(a.Whole) {
			return nil, fmt.Errorf("signature type %.40q", a.Whole)
		}
		r.Whole = &layout.Signature{Type: a.Whole}
	}
	if !a.Usable {
		switch {
		case a.FAT != nil:
			return nil, errors.New("a FAT partition on a medium that is not usable")
		case r.Reason == "":
			return nil, errors.New("not usable, and no reason")
		case a.Blank && (a.Table != protocol.ProbeTableUnknown || a.Whole != ""):
			return nil, fmt.Errorf("blank, with a %s table and signature %q", a.Table, a.Whole)
		}
		return out, nil
	}
	p := a.FAT
	switch {
	case p == nil:
		return nil, errors.New("usable, and no FAT partition")
	case a.Blank || a.Whole != "":
		return nil, errors.New("usable, and blank or holding another signature")
	case p.Start < 0 || p.Size <= 0 || p.Start > size-p.Size:
		return nil, fmt.Errorf("FAT partition of %d bytes at %d on a medium of %d bytes", p.Size, p.Start, size)
	case a.Table == protocol.ProbeTableSuperfloppy && (p.Number != 0 || p.Start != 0 || p.Size != size),
		table && (p.Number < 1 || p.Number > protocol.MaxProbePartition),
		a.Table == protocol.ProbeTableUnknown || a.Table == protocol.ProbeTableInvalid:
		return nil, fmt.Errorf("FAT partition number %d in a table of kind %s", p.Number, a.Table)
	}
	r.FAT = layout.Partition{Number: p.Number, Start: p.Start, Size: p.Size}
	if table {
		// layout.Find's choice: a partition of the table whose type says FAT.
		found := false
		for _, tp := range r.Layout.Partitions {
			if tp.Number == p.Number && tp.Start == p.Start && tp.Size == p.Size && tp.IsFATType() {
				r.FAT, found = tp, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("FAT partition %d is not a partition of the table of a FAT type", p.Number)
		}
	}
	r.Reason = ""
	return out, nil
}

// checkEntries checks the partitions of a table as an answer lists them: at most
// protocol.MaxProbeEntries, numbered upwards from 1, inside the medium, none overlapping
// another; GUIDs in layout's form on a GPT only, a type byte on an MBR only; known signature
// types; names of at most 36 characters, cleaned.
func checkEntries(entries []protocol.ProbeTableEntry, kind layout.Kind, size int64) ([]layout.Partition, error) {
	if len(entries) > protocol.MaxProbeEntries {
		return nil, fmt.Errorf("%d partitions, more than %d", len(entries), protocol.MaxProbeEntries)
	}
	parts := make([]layout.Partition, 0, len(entries))
	last := 0
	for _, e := range entries {
		switch {
		case e.Number <= last || e.Number > protocol.MaxProbePartition:
			return nil, fmt.Errorf("partition number %d after %d", e.Number, last)
		case e.Start < 0 || e.Size <= 0 || e.Start > size-e.Size:
			return nil, fmt.Errorf("partition %d of %d bytes at %d on a medium of %d bytes", e.Number, e.Size, e.Start, size)
		case e.Signature != "" && !layout.KnownType(e.Signature):
			return nil, fmt.Errorf("partition %d: signature type %.40q", e.Number, e.Signature)
		case utf8.RuneCountInString(e.Name) > 36 || !utf8.ValidString(e.Name):
			return nil, fmt.Errorf("partition %d: a name of %d bytes", e.Number, len(e.Name))
		case kind == layout.GPT && (e.MBRType != 0 || !canonicalGUID(e.GUID) || !canonicalGUID(e.TypeGUID)):
			return nil, fmt.Errorf("GPT partition %d: type byte %d, GUIDs %.40q and %.40q", e.Number, e.MBRType, e.TypeGUID, e.GUID)
		case kind == layout.MBR && (e.GUID != "" || e.TypeGUID != "" || e.Name != ""):
			return nil, fmt.Errorf("MBR partition %d with a GUID or a name", e.Number)
		}
		last = e.Number
		parts = append(parts, layout.Partition{Number: e.Number, Start: e.Start, Size: e.Size, MBRType: e.MBRType,
			TypeGUID: e.TypeGUID, GUID: e.GUID, Name: cleanReason(e.Name)})
	}
	byStart := append([]layout.Partition(nil), parts...)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].Start < byStart[j].Start })
	for i := 1; i < len(byStart); i++ {
		if prev := byStart[i-1]; byStart[i].Start < prev.Start+prev.Size {
			return nil, fmt.Errorf("partitions %d and %d overlap", prev.Number, byStart[i].Number)
		}
	}
	return parts, nil
}

// canonicalGUID tells whether s is a GUID as layout writes one: 8-4-4-4-12 upper-case hex digits.
func canonicalGUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'A' || c > 'F') {
				return false
			}
		}
	}
	return true
}

// cleanReason makes a prober's text safe to show: valid UTF-8, no control characters, at most
// protocol.MaxProbeReason bytes.
func cleanReason(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, " "))
	s = strings.TrimSpace(s)
	if len(s) <= protocol.MaxProbeReason {
		return s
	}
	n := protocol.MaxProbeReason
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// firstLine is the first line of a prober's standard error, cleaned, as ": line", or "": its
// own error, or the Go runtime's fatal error or panic before the stacks.
func firstLine(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if l := cleanReason(line); l != "" {
		return ": " + l
	}
	return ""
}

// cappedBuffer keeps the first max bytes written and drops the rest, so that a prober that
// writes without end neither blocks nor fills this process's memory.
type cappedBuffer struct {
	max  int
	buf  bytes.Buffer
	over bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); len(p) > room {
		c.over = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *cappedBuffer) Bytes() []byte { return c.buf.Bytes() }
