package mounter

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// ProbeDeviceFD is the descriptor the probe finds the medium at, opened read-only by the plugin.
const ProbeDeviceFD = 3

// ProbeMemoryBudget is how much more writable memory than it had at its start the probe may map
// (RLIMIT_DATA, set to what /proc/self/status counts as VmData plus this): layout.Probe needs
// a tiny part of it (a GPT's entry array, the largest thing it reads, is at most 1 MiB), and a
// medium that made the parser allocate without end makes the probe fail instead of the node run
// out of memory. Neither RLIMIT_AS nor a soft limit would do: the Go runtime reserves far more
// address space than it uses (about 1.6 GiB at start on amd64), and the runtime's memory limit
// (GOMEMLIMIT) only makes the collector work harder.
const ProbeMemoryBudget = 256 << 20

// ProbeMain runs the probe-medium command with its arguments (those after "probe-medium") and
// returns the exit code: it reads what the medium at descriptor ProbeDeviceFD holds
// (layout.Probe) and writes a protocol.ProbeAnswer as JSON on stdout. The node plugin starts it,
// unprivileged, for every look at a removable medium, so that the plugin never parses what a
// medium holds. It is `csi-fat probe-medium`; test binaries that stand in for csi-fat call it too.
func ProbeMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe-medium", flag.ContinueOnError)
	fs.SetOutput(stderr)
	size := fs.Int64("size", 0, "the medium's size in bytes")
	blockSize := fs.Int("block-size", 512, "the medium's logical block size in bytes")
	device := fs.String("device", "", "the medium's path, for messages")
	closeFDs := fs.String("close-fds", "", "descriptors inherited from the plugin to close at once, comma-separated")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: csi-fat probe-medium --size=BYTES [OPTIONS]\n\n"+
			"Say what the medium at descriptor %d holds, as JSON: the node plugin starts this command,\n"+
			"unprivileged, to look at a removable medium. Not meant to be run by hand.\n\noptions:\n", ProbeDeviceFD)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	// Started through /proc/self/fd/N, the process would be named "N".
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("csi-fat-probe\x00")[0])), 0, 0, 0)
	for _, f := range strings.Split(*closeFDs, ",") {
		if fd, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && fd > ProbeDeviceFD {
			unix.Close(fd)
		}
	}
	if err := confineProbe(); err != nil {
		fmt.Fprintf(stderr, "probe-medium: %v\n", err)
		return 1
	}
	lbs := *blockSize
	if *size <= 0 || lbs < 512 || lbs > 64<<10 || lbs&(lbs-1) != 0 {
		fmt.Fprintf(stderr, "probe-medium: size %d, block size %d: want a size and a power of two from 512 to 65536\n", *size, lbs)
		return 2
	}
	fault("probe", *device)
	f := os.NewFile(ProbeDeviceFD, *device)
	if f == nil {
		fmt.Fprintf(stderr, "probe-medium: no descriptor %d\n", ProbeDeviceFD)
		return 1
	}
	m := layout.FileMedium{File: f, Bytes: *size, BlockSize: lbs}
	r, err := layout.Probe(m)
	if err := json.NewEncoder(stdout).Encode(probeAnswer(m, r, err)); err != nil {
		fmt.Fprintf(stderr, "probe-medium: %v\n", err)
		return 1
	}
	return 0
}

// confineProbe takes from this process what a parser of hostile data should not have: gaining
// privileges by exec (no_new_privs), more than ProbeMemoryBudget of further memory, core dumps
// of a medium's bytes.
func confineProbe() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	data, err := dataSize()
	if err != nil {
		return err
	}
	for _, l := range []struct {
		res  int
		max  uint64
		name string
	}{{unix.RLIMIT_DATA, data + ProbeMemoryBudget, "data size"}, {unix.RLIMIT_CORE, 0, "core size"}} {
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.max, Max: l.max}); err != nil {
			return fmt.Errorf("limit the %s: %w", l.name, err)
		}
	}
	return nil
}

// dataSize is this process's writable private memory (VmData in /proc/self/status), in bytes:
// what RLIMIT_DATA counts.
func dataSize() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read the data size: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmData:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("data size %q: %w", line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmData in /proc/self/status")
}

// probeAnswer reduces a layout.Probe report of m to the answer the plugin reads, with the
// signature at the start of each partition of a table.
func probeAnswer(m layout.Medium, r *layout.Report, err error) *protocol.ProbeAnswer {
	if err != nil || r == nil {
		if err == nil {
			err = errors.New("no report")
		}
		return &protocol.ProbeAnswer{Table: protocol.ProbeTableUnknown, Error: cutReason(err.Error())}
	}
	a := &protocol.ProbeAnswer{Usable: r.Usable, Blank: r.Blank, Reason: cutReason(r.Reason), Table: protocol.ProbeTableInvalid}
	if r.Layout != nil {
		a.Table = r.Layout.Kind.String()
	}
	if r.Usable {
		a.FAT = &protocol.ProbePartition{Number: r.FAT.Number, Start: r.FAT.Start, Size: r.FAT.Size}
	}
	if r.Whole != nil {
		a.Whole = r.Whole.Type
	}
	if r.Layout != nil && (r.Layout.Kind == layout.MBR || r.Layout.Kind == layout.GPT) {
		if len(r.Layout.Partitions) > protocol.MaxProbeEntries {
			return &protocol.ProbeAnswer{Table: protocol.ProbeTableUnknown,
				Error: fmt.Sprintf("its partition table has %d partitions, more than %d", len(r.Layout.Partitions), protocol.MaxProbeEntries)}
		}
		for _, p := range r.Layout.Partitions {
			e := protocol.ProbeTableEntry{Number: p.Number, Start: p.Start, Size: p.Size, MBRType: p.MBRType,
				TypeGUID: p.TypeGUID, GUID: p.GUID, Name: p.Name}
			if sig, ok, err := layout.ProbeAt(m, p.Start, p.Size); err == nil && ok {
				e.Signature = sig.Type
			}
			a.Partitions = append(a.Partitions, e)
		}
	}
	return a
}

// cutReason cuts s to at most protocol.MaxProbeReason bytes of valid UTF-8.
func cutReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= protocol.MaxProbeReason {
		return s
	}
	const more = " …"
	n := protocol.MaxProbeReason - len(more)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + more
}
