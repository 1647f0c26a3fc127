package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/media"
)

// What a free removable medium holds (layout.Probe: its partition table and signatures) is
// read, outside MounterInProcess, by a short-lived process of its own (`csi-fat probe-medium`,
// mounter.ProbeMain) that runs as the mounters' unprivileged user with no capability and a
// bounded memory, on a read-only descriptor of the device, so that this privileged process never
// parses what a medium holds. Its answer is as untrusted as the medium: read within a size
// bound and checked field by field; a prober that fails, dies or overruns its time leaves the
// medium unreadable, never this process misled.

const (
	// defaultProbeTimeout bounds a probe: it reads a few KiB, so only a medium that makes the
	// parser loop or a device that does not answer takes that long.
	defaultProbeTimeout = 10 * time.Second
	// probeCacheTTL is how long a look at a medium is reused for the same device (same identity,
	// kernel name, size, device number and disk sequence number): a metrics scrape and a
	// GetCapacity poll start no process per device each, and a medium plugged, pulled or written
	// by the host is seen within that time (a re-plug changes the disk sequence at once).
	probeCacheTTL = 2 * time.Second
	// probeReapWait is how long a prober killed at its time limit is waited for: one stuck in
	// a read of the device ends only when the read does, and is then reaped in the background.
	probeReapWait = 2 * time.Second
	// maxProbeStderr bounds what is kept of a prober's standard error, for the reason it failed.
	maxProbeStderr = 4 << 10
)

// probeTimeout is ProbeTimeout with its default.
func (c MounterConfig) probeTimeout() time.Duration {
	if c.ProbeTimeout <= 0 {
		return defaultProbeTimeout
	}
	return c.ProbeTimeout
}

// probeCommand is the command that runs a prober: ProbeCommand, or the mounter's binary with
// "probe-medium".
func (c MounterConfig) probeCommand() ([]string, error) {
	if len(c.ProbeCommand) > 0 {
		return c.ProbeCommand, nil
	}
	command, err := c.mounterCommand()
	if err != nil {
		return nil, err
	}
	return []string{command[0], "probe-medium"}, nil
}

// readMedium says what the free device d, opened read-only as f, holds: in a prober process outside MounterInProcess (a recent look at the same medium
// is reused), else here.
func (m *Manager) readMedium(f layout.FileMedium, d media.Device) (*mediumProbe, error) {
	if !m.cfg.Mounter.process() {
		return m.readMediumHere(f)
	}
	return m.layoutProbes.get(f.File, d, f.BlockSize, func() (*mediumProbe, error) {
		r, err := m.cfg.Mounter.runProbe(f.File, d.Path, d.Size, f.BlockSize)
		if err != nil {
			klog.InfoS("removable medium unreadable: its probe failed", "device", d.ID, "path", d.Path, "err", err)
		}
		return r, err
	})
}

// probeForFormat says what dev, claimed (O_EXCL) for a format, holds: in a prober process
// outside MounterInProcess, on a read-only descriptor of the same open device (the claim stays
// here), never from what was seen before. A prober that fails leaves a report that is neither
// usable nor blank and has no table, with the reason: the device is then not written.
func (m *Manager) probeForFormat(dev *blockdev.File) (*mediumProbe, error) {
	if !m.cfg.Mounter.process() {
		return m.readMediumHere(dev)
	}
	ro, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", dev.OSFile().Fd()), os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen %s read-only for its probe: %w", dev.Path(), err)
	}
	defer ro.Close()
	r, err := m.cfg.Mounter.runProbe(ro, dev.Path(), dev.Size(), dev.LogicalBlockSize())
	if err != nil {
		klog.InfoS("removable medium not formatted: its probe failed", "path", dev.Path(), "err", err)
		return &mediumProbe{Report: &layout.Report{Reason: fmt.Sprintf("what it holds could not be read: %v", err)}}, nil
	}
	return r, nil
}

// forgetProbe drops what was seen on the device at path: it is being written.
func (m *Manager) forgetProbe(path string) { m.layoutProbes.forget(path) }

// runProbe runs a prober on dev (its descriptor 3) and reads its answer; an error says why there
// is none: the prober failed, was killed at the time limit, or answered what cannot be true.
func (c MounterConfig) runProbe(dev *os.File, path string, size int64, lbs int) (*mediumProbe, error) {
	command, err := c.probeCommand()
	if err != nil {
		return nil, err
	}
	cmd, exe, err := c.unprivilegedCommand(command, []*os.File{dev},
		"--device="+path, "--size="+strconv.FormatInt(size, 10), "--block-size="+strconv.Itoa(lbs))
	if err != nil {
		return nil, err
	}
	defer exe.Close()
	stdout := &cappedBuffer{max: protocol.MaxProbeAnswer}
	stderr := &cappedBuffer{max: maxProbeStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// It dies with this process, and its pipes are not waited for long once it is gone (were
	// they passed on to a process of its own).
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the probe of %s: %w", path, err)
	}
	exe.Close()
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timeout := c.probeTimeout()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err = <-done:
	case <-timer.C:
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(probeReapWait):
		}
		return nil, fmt.Errorf("the probe of %s (pid %d) did not answer within %v: killed", path, pid, timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("the probe of %s (pid %d) failed: %v%s", path, pid, err, firstLine(stderr.Bytes()))
	}
	if stdout.over {
		return nil, fmt.Errorf("the probe of %s (pid %d) answered more than %d bytes: refused", path, pid, protocol.MaxProbeAnswer)
	}
	r, err := parseProbeAnswer(stdout.Bytes(), size, lbs)
	if err != nil {
		return nil, fmt.Errorf("the probe of %s (pid %d) answered what cannot be true: %w", path, pid, err)
	}
	return r, nil
}

// parseProbeAnswer checks a prober's answer for a medium of size bytes and logical block size
// lbs and turns it into what readMedium would have found: the report's Usable, Blank, Reason,
// FAT (the partition's number, start and size), Whole's type and Layout (its kind and, for a
// table, its partitions; nil for a table that cannot be trusted), and the FAT partitions by
// readMedium's rule (a FAT type and a FAT signature). Nothing else of the report is set. One
// JSON object with no unknown field, of a known table kind and signature types, partitions and
// the FAT partition inside the medium, numbered in order, not overlapping; the texts are cut and
// cleaned.
func parseProbeAnswer(b []byte, size int64, lbs int) (*mediumProbe, error) {
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
	out := &mediumProbe{Report: r}
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
	parts, err := checkProbeEntries(a.Partitions, kind, size)
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

// checkProbeEntries checks the partitions of a table as an answer lists them: at most
// protocol.MaxProbeEntries, numbered upwards from 1, inside the medium, none overlapping
// another; GUIDs in layout's form on a GPT only, a type byte on an MBR only; known signature
// types; names of at most 36 characters, cleaned.
func checkProbeEntries(entries []protocol.ProbeTableEntry, kind layout.Kind, size int64) ([]layout.Partition, error) {
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

// layoutProbeCache keeps the last look at each device for probeCacheTTL, and makes looks at
// one device at once share one prober. Its zero value is ready.
type layoutProbeCache struct {
	mu      sync.Mutex
	entries map[string]*layoutProbeEntry // by device path
}

// layoutProbeKey is what must not change for a look at a device to be reused.
type layoutProbeKey struct {
	id, kernel string
	size       int64
	lbs        int
	rdev       uint64 // the device number
	diskseq    uint64 // the kernel's disk sequence number: new for each medium a device gets
}

// layoutProbeEntry is one look; report and err are set before done is closed.
type layoutProbeEntry struct {
	key    layoutProbeKey
	start  time.Time
	done   chan struct{}
	report *mediumProbe
	err    error
}

func (e *layoutProbeEntry) finished() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// get returns the look at d (open as f) started less than probeCacheTTL ago, waits for the one
// under way, or takes one with probe.
func (c *layoutProbeCache) get(f *os.File, d media.Device, lbs int, probe func() (*mediumProbe, error)) (*mediumProbe, error) {
	key := layoutProbeKey{id: d.ID, kernel: d.Kernel, size: d.Size, lbs: lbs}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil {
		key.rdev = st.Rdev
	}
	key.diskseq = diskSeq(f)
	c.mu.Lock()
	if e := c.entries[d.Path]; e != nil && e.key == key && (!e.finished() || time.Since(e.start) < probeCacheTTL) {
		c.mu.Unlock()
		<-e.done
		return e.report, e.err
	}
	if c.entries == nil {
		c.entries = map[string]*layoutProbeEntry{}
	}
	for p, e := range c.entries {
		if e.finished() && time.Since(e.start) >= probeCacheTTL {
			delete(c.entries, p)
		}
	}
	e := &layoutProbeEntry{key: key, start: time.Now(), done: make(chan struct{})}
	c.entries[d.Path] = e
	c.mu.Unlock()
	e.report, e.err = probe()
	close(e.done)
	return e.report, e.err
}

// forget drops the look at the device at path, and the one under way: the device is being
// written, so what they saw is not kept (those waiting for the one under way still get it).
func (c *layoutProbeCache) forget(path string) {
	c.mu.Lock()
	delete(c.entries, path)
	c.mu.Unlock()
}

// blkGetDiskSeq is BLKGETDISKSEQ, _IOR(0x12, 128, __u64) (Linux 5.15).
const blkGetDiskSeq = 0x80081280

// diskSeq is the disk sequence number of the block device open as f, 0 where there is none (an
// image file, an older kernel).
func diskSeq(f *os.File) uint64 {
	var seq uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), blkGetDiskSeq, uintptr(unsafe.Pointer(&seq))); errno != 0 {
		return 0
	}
	return seq
}
