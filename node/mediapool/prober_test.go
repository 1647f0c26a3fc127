package mediapool

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/layout"
	"github.com/csi-fat/csi-fat/internal/testenv"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/inprocess"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/prober"
	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"
)

// probePools are a pool that probes in this process and one that probes in prober processes
// (process mode): the only parts of a Pool the probe uses.
func probePools(cfg mounters.Config) (inProcess, withProber *Pool) {
	cfg.Mode = mounters.Process
	return &Pool{prober: prober.New(mounters.Config{}, inprocess.Engine{})}, &Pool{prober: prober.New(cfg, nil)}
}

// probeStick is a stand-in stick of the given size, as the pool sees it.
func probeStick(t *testing.T, fake *usbtest.Fake, size int64, serial string) (*usbtest.Stick, media.Device) {
	s := fake.Add(t, size, "Fake", "Probe", serial)
	return s, media.Device{ID: s.ByID, Kernel: s.Kernel, Path: s.Loop, Size: s.Size}
}

func runTool(t *testing.T, stdin string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestProbeInProber: what a prober process says about real media (a superfloppy FAT made by
// mkfs.fat, an MBR with a FAT partition made by sfdisk and mkfs.fat, ext4 made by mkfs.ext4, a
// blank stick) is what layout.Probe says in this process, field by field that the pool reads,
// and the pool names them the same (state, content, reason) and formats the same.
func TestProbeInProber(t *testing.T) {
	testenv.RequireLoop(t)
	testenv.RequireTool(t, "mkfs.fat", "sfdisk", "mkfs.ext4")
	fake := usbtest.New(t)
	super, superDev := probeStick(t, fake, 40<<20, "PROBE01")
	mbr, mbrDev := probeStick(t, fake, 48<<20, "PROBE02")
	ext4, ext4Dev := probeStick(t, fake, 56<<20, "PROBE03")
	_, blankDev := probeStick(t, fake, 64<<20, "PROBE04")
	runTool(t, "", "mkfs.fat", super.Loop)
	runTool(t, "label: dos\nstart=2048, type=c\n", "sfdisk", "--no-reread", "--no-tell-kernel", "-q", mbr.Loop)
	runTool(t, "", "mkfs.fat", "--offset=2048", mbr.Loop, fmt.Sprint((48<<20-1<<20)/1024))
	runTool(t, "", "mkfs.ext4", "-q", "-F", ext4.Loop)
	inProcess, withProber := probePools(mounters.Config{})
	for _, c := range []struct {
		d            media.Device
		state, conts string
	}{
		{superDev, media.StateFAT, "superfloppy"},
		{mbrDev, media.StateFAT, "partition"},
		{ext4Dev, media.StateForeign, layout.TypeExt4},
		{blankDev, media.StateBlank, ""},
	} {
		f, err := os.Open(c.d.Path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := inProcess.prober.Here(layout.FileMedium{File: f, Bytes: c.d.Size, BlockSize: 512})
		if err != nil {
			t.Fatal(err)
		}
		got, err := prober.Run(mounters.Config{Mode: mounters.Process}, f, c.d.Path, c.d.Size, 512)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.d.Path, err)
		}
		if g, w := reportFields(got), reportFields(want); g != w {
			t.Errorf("%s: the prober says\n%s\nlayout.Probe here says\n%s", c.d.Path, g, w)
		}
		ws, wc, wr := inProcess.ProbeMedium(c.d)
		gs, gc, gr := withProber.ProbeMedium(c.d)
		if gs != ws || gc != wc || gr != wr || gs != c.state || gc != c.conts {
			t.Errorf("%s: pool with a prober: %s, %q, %q; in process: %s, %q, %q; want %s, %q", c.d.Path, gs, gc, gr, ws, wc, wr, c.state, c.conts)
		}
	}
	// A GPT of 60 partitions: the reason names each, far more than the 1 KiB a reason may hold; the
	// prober cuts it, and the pool names the stick as layout.Probe here does.
	gpt, gptDev := probeStick(t, fake, 72<<20, "PROBE05")
	runTool(t, "label: gpt\n"+strings.Repeat(",1M\n", 60), "sfdisk", "--no-reread", "--no-tell-kernel", "-q", gpt.Loop)
	if key := prober.DiskSeq(openFile(t, gpt.Loop)); key == 0 || key == prober.DiskSeq(openFile(t, super.Loop)) {
		t.Errorf("disk sequence numbers %d and %d of two loop devices: want two, not 0", key, prober.DiskSeq(openFile(t, super.Loop)))
	}
	ws, wc, wr := inProcess.ProbeMedium(gptDev)
	gs, gc, gr := withProber.ProbeMedium(gptDev)
	cut := strings.TrimSuffix(gr, " (wipe=true formats it)")
	if gs != ws || gc != wc || gs != media.StateForeign || gc != "partition_table" || len(wr) < 4*protocol.MaxProbeReason ||
		len(cut) > protocol.MaxProbeReason || !strings.HasSuffix(cut, " …") || !strings.HasPrefix(wr, strings.TrimSuffix(cut, " …")) {
		t.Errorf("GPT of 60 partitions: with a prober %s, %s, %d bytes %.80q...; in process %s, %s, %d bytes", gs, gc, len(gr), gr, ws, wc, len(wr))
	}
	// Formatting for a new volume: the FAT and blank sticks are formatted, the ext4 one is not,
	// for the reason layout.Probe gives.
	params, err := volume.ParseParams(map[string]string{volume.ParamPool: volume.PoolUSB})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []media.Device{superDev, mbrDev, blankDev} {
		if _, err := withProber.FormatNew(d.Path, params); err != nil {
			t.Errorf("format %s: %v", d.Path, err)
		} else if state, content, _ := withProber.ProbeMedium(d); state != media.StateFAT || content != "superfloppy" {
			t.Errorf("%s after the format: %s, %s; want fat, superfloppy", d.Path, state, content)
		}
		runTool(t, "", "fsck.fat", "-n", d.Path)
	}
	_, err = withProber.FormatNew(ext4Dev.Path, params)
	_, _, reason := inProcess.ProbeMedium(ext4Dev)
	if want := reason[:strings.Index(reason, " (")]; err == nil || !strings.Contains(err.Error(), "not formatted: "+want) {
		t.Errorf("format of the ext4 stick: %v; want not formatted: %s", err, want)
	}
	runTool(t, "", "fsck.ext4", "-n", ext4.Loop)
}

// openFile opens path read-only until the test ends.
func openFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// reportFields is what the pool reads of a look at a medium.
func reportFields(pr *prober.Result) string {
	r := pr.Report
	kind := "nil"
	var parts []layout.Partition
	if r.Layout != nil {
		kind = r.Layout.Kind.String()
		parts = r.Layout.Partitions
	}
	whole := ""
	if r.Whole != nil {
		whole = r.Whole.Type
	}
	return fmt.Sprintf("usable %v blank %v fat %+v layout %s %+v whole %q reason %q FAT partitions %+v",
		r.Usable, r.Blank, r.FAT, kind, parts, whole, r.Reason, pr.FATPartitions)
}

// proberPIDs are the probers this process runs.
func proberPIDs() []int { return probersOf(os.Getpid()) }

// probersOf are the probers process parent runs.
func probersOf(parent int) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "(csi-fat-probe") {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(parent) {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			pids = append(pids, pid)
		}
	}
	return pids
}

// proberPID waits for the prober this process started and returns its pid.
func proberPID(t *testing.T) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if pids := proberPIDs(); len(pids) > 0 {
			return pids[0]
		}
	}
	t.Fatal("no prober started")
	return 0
}

// statusField is a field of /proc/pid/status.
func statusField(status, name string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "<none>"
}

// TestProberUnprivilegedAndKilled: the prober runs as nobody with no group and no capability,
// with no_new_privs, a bounded data size and no core dumps, and holds the device read-only,
// for a format too while this process holds the device's claim; one that hangs (a hostile
// medium making the parser loop, the fault hook) is killed at the time limit and the device
// reported unreadable for that reason, and no format happens.
func TestProberUnprivilegedAndKilled(t *testing.T) {
	testenv.RequireLoop(t)
	fake := usbtest.New(t)
	stick, d := probeStick(t, fake, 32<<20, "HANG01")
	t.Setenv(protocol.FaultEnv, "probe-hang:"+stick.Loop)
	// Long enough for the prober (the race-built test binary, under load) to start and name
	// itself, which its checks look for, before the limit kills it.
	const timeout = 4 * time.Second
	_, withProber := probePools(mounters.Config{ProbeTimeout: timeout})
	check := func(t *testing.T, pid int) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		status := string(b)
		for field, want := range map[string]string{
			"Uid": "65534 65534 65534 65534", "Gid": "65534 65534 65534 65534", "Groups": "",
			"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000", "CapAmb": "0000000000000000",
			"NoNewPrivs": "1",
		} {
			if got := statusField(status, field); got != want {
				t.Errorf("prober %s: %q, want %q", field, got, want)
			}
		}
		limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(limits), "\n") {
			f := strings.Fields(l)
			switch {
			case strings.HasPrefix(l, "Max data size"):
				if n, err := strconv.ParseInt(f[3], 10, 64); err != nil || n > 1<<30 {
					t.Errorf("prober's data size limit: %q, want at most 1 GiB", l)
				}
			case strings.HasPrefix(l, "Max core file size"):
				if f[4] != "0" {
					t.Errorf("prober's core size limit: %q, want 0", l)
				}
			}
		}
		fdinfo, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/3", pid))
		if err != nil {
			t.Fatal(err)
		}
		flags, err := strconv.ParseUint(statusField(string(fdinfo), "flags"), 8, 32)
		if err != nil || flags&unix.O_ACCMODE != unix.O_RDONLY {
			t.Errorf("prober's descriptor 3: flags %s (%v), want read-only", statusField(string(fdinfo), "flags"), err)
		}
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", pid)); link != stick.Loop {
			t.Errorf("prober's descriptor 3 is %s, want %s", link, stick.Loop)
		}
	}
	t.Run("Look", func(t *testing.T) {
		type verdict struct{ state, content, reason string }
		done := make(chan verdict, 1)
		start := time.Now()
		go func() {
			var v verdict
			v.state, v.content, v.reason = withProber.ProbeMedium(d)
			done <- v
		}()
		pid := proberPID(t)
		check(t, pid)
		v := <-done
		took := time.Since(start)
		if v.state != media.StateUnreadable || !strings.Contains(v.reason, fmt.Sprintf("did not answer within %v: killed", timeout)) {
			t.Errorf("a hanging prober: %s, %q; want unreadable, killed at the time limit", v.state, v.reason)
		}
		if took < timeout || took > timeout+3*time.Second {
			t.Errorf("the look took %v; want the time limit, %v", took, timeout)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("prober %d is still there", pid)
		}
	})
	t.Run("Shared", func(t *testing.T) {
		// Three looks at once at the device (a scrape, a GetCapacity, /media) share one prober.
		withProber.prober.Forget(d.Path) // the look before is still fresh
		done := make(chan string, 3)
		look := func() {
			state, _, reason := withProber.ProbeMedium(d)
			done <- state + ": " + reason
		}
		go look()
		proberPID(t)
		go look()
		go look()
		time.Sleep(300 * time.Millisecond)
		if pids := proberPIDs(); len(pids) != 1 {
			t.Errorf("%d probers for three looks at once at one device, want 1", len(pids))
		}
		for range 3 {
			if v := <-done; !strings.Contains(v, "did not answer within") {
				t.Errorf("a look: %s; want the one prober's end", v)
			}
		}
	})
	t.Run("Format", func(t *testing.T) {
		params, err := volume.ParseParams(map[string]string{volume.ParamPool: volume.PoolUSB})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := withProber.FormatNew(d.Path, params); done <- err }()
		check(t, proberPID(t))
		// The claim is this process's: another exclusive open is refused meanwhile.
		if dev, err := blockdev.Open(d.Path, false); err == nil {
			dev.Close()
			t.Error("the device is not claimed while its prober runs")
		}
		err = <-done
		if err == nil || !strings.Contains(err.Error(), "not formatted: what it holds could not be read") || !strings.Contains(err.Error(), "killed") {
			t.Errorf("format with a hanging prober: %v; want not formatted, the prober killed", err)
		}
		var head [512]byte
		f, err := os.Open(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.ReadAt(head[:], 0); err != nil || head != [512]byte{} {
			t.Errorf("the device was written (%v)", err)
		}
	})
}

// TestProberDiesWithDriver: a driver killed (SIGKILL) while its prober hangs takes the prober
// with it (the parent-death signal, set after the change of user that would clear it).
func TestProberDiesWithDriver(t *testing.T) {
	testenv.RequireLoop(t)
	fake := usbtest.New(t)
	stick, _ := probeStick(t, fake, 32<<20, "ORPHAN01")
	driver := exec.Command(os.Args[0], "-test.run=^$")
	driver.Env = append(os.Environ(), probeParentEnv+"="+stick.Loop, protocol.FaultEnv+"=probe-hang:"+stick.Loop)
	if err := driver.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for deadline := time.Now().Add(5 * time.Second); len(pids) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		pids = probersOf(driver.Process.Pid)
	}
	if len(pids) != 1 {
		driver.Process.Kill()
		driver.Wait()
		t.Fatalf("the driver runs %d probers, want 1", len(pids))
	}
	driver.Process.Kill()
	driver.Wait()
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pids[0]))
		if err != nil || strings.Contains(string(b), "csi-fat-probe) Z") {
			break // gone, or dead and waiting for init to reap it
		}
		if time.Now().After(deadline) {
			syscall.Kill(pids[0], syscall.SIGKILL)
			t.Fatalf("prober %d still runs 3 s after its driver was killed", pids[0])
		}
	}
}

// TestProberMemoryBound: a prober made to allocate without end (the fault hook, as a hostile
// medium could make a parser) fails at its data size limit, long before it holds the 4 GiB it
// asks for, and the device is unreadable.
func TestProberMemoryBound(t *testing.T) {
	testenv.RequireLoop(t)
	fake := usbtest.New(t)
	stick, d := probeStick(t, fake, 32<<20, "ALLOC01")
	t.Setenv(protocol.FaultEnv, "probe-alloc:"+stick.Loop)
	_, withProber := probePools(mounters.Config{ProbeTimeout: time.Minute})
	state, _, reason := withProber.ProbeMedium(d)
	// Go's runtime says "out of memory"; under the race detector (test/run) ThreadSanitizer's
	// allocator meets the bound first and says it could not allocate (errno 12, ENOMEM).
	bounded := strings.Contains(reason, "out of memory") ||
		strings.Contains(reason, "ThreadSanitizer failed to allocate") && strings.Contains(reason, "errno: 12")
	if state != media.StateUnreadable || !bounded {
		t.Errorf("a prober allocating without end: %s, %q; want unreadable, out of memory", state, reason)
	}
}

// TestProberCache: a look is reused for a short while (a stick formatted behind the pool's back
// is seen after it), a format by the pool is seen at once, and a medium of another size is
// looked at anew.
func TestProberCache(t *testing.T) {
	testenv.RequireLoop(t)
	testenv.RequireTool(t, "mkfs.fat")
	fake := usbtest.New(t)
	stick, d := probeStick(t, fake, 32<<20, "CACHE01")
	_, withProber := probePools(mounters.Config{})
	if state, _, _ := withProber.ProbeMedium(d); state != media.StateBlank {
		t.Fatalf("a new stick: %s, want blank", state)
	}
	looked := time.Now()
	runTool(t, "", "mkfs.fat", stick.Loop)
	if state, _, _ := withProber.ProbeMedium(d); state != media.StateBlank && time.Since(looked) < prober.CacheTTL {
		t.Errorf("looked anew within %v: %s, want the blank of the look before", prober.CacheTTL, state)
	}
	other := d
	other.Size -= 1 << 20
	if state, content, _ := withProber.ProbeMedium(other); state != media.StateFAT || content != "superfloppy" {
		t.Errorf("another size: %s, %s; want a new look: fat, superfloppy", state, content)
	}
	time.Sleep(prober.CacheTTL)
	if state, content, _ := withProber.ProbeMedium(d); state != media.StateFAT || content != "superfloppy" {
		t.Errorf("after %v: %s, %s; want fat, superfloppy", prober.CacheTTL, state, content)
	}
	// Wiped behind the pool's back, then formatted by it: the format is seen at once.
	runTool(t, "", "dd", "if=/dev/zero", "of="+stick.Loop, "bs=64k", "count=1", "conv=fsync", "status=none")
	if state, _, _ := withProber.ProbeMedium(d); state != media.StateFAT {
		t.Fatalf("within %v of the last look: %s, want fat", prober.CacheTTL, state)
	}
	params, err := volume.ParseParams(map[string]string{volume.ParamPool: volume.PoolUSB, volume.ParamWipe: "true", volume.ParamLabel: "FRESH"})
	if err != nil {
		t.Fatal(err)
	}
	runTool(t, "", "mkfs.ext4", "-q", "-F", stick.Loop)
	if _, err := withProber.FormatNew(d.Path, params); err != nil {
		t.Fatal(err)
	}
	if state, content, _ := withProber.ProbeMedium(d); state != media.StateFAT || content != "superfloppy" {
		t.Errorf("right after the pool's format: %s, %s; want fat, superfloppy", state, content)
	}
	if out, _ := exec.Command("fatlabel", stick.Loop).Output(); strings.TrimSpace(string(out)) != "FRESH" {
		t.Errorf("label after the format: %q", out)
	}
}

// hostileProber writes a script that stands in for the prober and answers (or does) what body
// says; it runs as nobody, so it is readable by all.
func hostileProber(t *testing.T, body string) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prober")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{path}
}

// TestHostileProber: what a prober that a hostile medium took over could answer is refused, and
// the device is unreadable with the reason, never taken as FAT or blank: answers too long, not
// JSON, with unknown fields or more than one value, of an unknown table kind or signature type,
// a FAT partition outside the device or numbered wrongly, contradictions; a prober that exits
// with an error, is killed by a signal, or writes without end. A well-formed answer from the same
// kind of script is taken as it says, and a reason is cut and cleaned.
func TestHostileProber(t *testing.T) {
	testenv.RequireLoop(t)
	fake := usbtest.New(t)
	_, d := probeStick(t, fake, 32<<20, "HOSTILE01")
	size := d.Size
	answer := func(json string) string { return "printf '%s' '" + json + "'" }
	for _, c := range []struct {
		name, body, want string
	}{
		{"too long", "head -c 2000000 /dev/zero | tr '\\0' ' '; echo '{}'", "answered more than"},
		{"not JSON", "echo garbage", "not a probe answer"},
		{"nothing", "true", "not a probe answer"},
		{"unknown field", answer(`{"usable":false,"blank":true,"table":"unknown","reason":"x","uid":0}`), "unknown field"},
		{"two values", answer(`{"usable":false,"blank":true,"table":"unknown","reason":"x"}{}`), "more than one JSON value"},
		{"table kind", answer(`{"usable":false,"table":"APM","reason":"x"}`), "table kind"},
		{"signature type", answer(`{"usable":false,"table":"unknown","whole":"evil\u001b[31m","reason":"x"}`), "signature type"},
		{"partition past the end", answer(fmt.Sprintf(`{"usable":true,"table":"MBR","fat":{"number":1,"start":1048576,"size":%d}}`, size)), "FAT partition of"},
		{"start and size overflow", answer(fmt.Sprintf(`{"usable":true,"table":"GPT","fat":{"number":1,"start":%d,"size":%d}}`, size, int64(math.MaxInt64))), "FAT partition of"},
		{"negative start", answer(`{"usable":true,"table":"GPT","fat":{"number":1,"start":-512,"size":512}}`), "FAT partition of"},
		{"partition 0 of a table", answer(`{"usable":true,"table":"MBR","fat":{"number":0,"start":0,"size":512}}`), "FAT partition number 0"},
		{"partition 1 of a superfloppy", answer(`{"usable":true,"table":"superfloppy","fat":{"number":1,"start":0,"size":512}}`), "FAT partition number 1"},
		{"partition number too high", answer(`{"usable":true,"table":"GPT","fat":{"number":100000,"start":0,"size":512}}`), "FAT partition number 100000"},
		{"usable without partition", answer(`{"usable":true,"table":"superfloppy"}`), "no FAT partition"},
		{"usable and blank", answer(`{"usable":true,"blank":true,"table":"superfloppy","fat":{"number":0,"start":0,"size":512}}`), "usable, and blank"},
		{"blank with a table", answer(`{"blank":true,"table":"MBR","reason":"x"}`), "blank, with a MBR table"},
		{"partition when not usable", answer(`{"table":"MBR","reason":"x","fat":{"number":1,"start":0,"size":512}}`), "not usable"},
		{"no reason", answer(`{"table":"unknown"}`), "no reason"},
		{"error and verdict", answer(`{"table":"unknown","blank":true,"error":"x"}`), "an error with a verdict"},
		{"partitions of a superfloppy", answer(`{"usable":true,"table":"superfloppy","fat":{"number":0,"start":0,"size":33554432},"partitions":[{"number":1,"start":0,"size":512}]}`), "partitions in a table of kind superfloppy"},
		{"partitions out of order", answer(`{"table":"MBR","reason":"x","partitions":[{"number":2,"start":0,"size":512},{"number":1,"start":512,"size":512}]}`), "partition number 1 after 2"},
		{"partitions overlapping", answer(`{"table":"MBR","reason":"x","partitions":[{"number":1,"start":0,"size":1024},{"number":2,"start":512,"size":512}]}`), "partitions 1 and 2 overlap"},
		{"partition outside", answer(fmt.Sprintf(`{"table":"MBR","reason":"x","partitions":[{"number":1,"start":512,"size":%d}]}`, size)), "partition 1 of"},
		{"GPT GUID", answer(`{"table":"GPT","reason":"x","partitions":[{"number":1,"start":0,"size":512,"typeGUID":"EBD0A0A2-B9E5-4433-87C0-68B6B72699C7","guid":"../../etc"}]}`), "GPT partition 1"},
		{"GPT name", answer(`{"table":"GPT","reason":"x","partitions":[{"number":1,"start":0,"size":512,"typeGUID":"EBD0A0A2-B9E5-4433-87C0-68B6B72699C7","guid":"EBD0A0A2-B9E5-4433-87C0-68B6B72699C7","name":"` + strings.Repeat("n", 37) + `"}]}`), "a name of 37 bytes"},
		{"MBR with a GUID", answer(`{"table":"MBR","reason":"x","partitions":[{"number":1,"start":0,"size":512,"guid":"EBD0A0A2-B9E5-4433-87C0-68B6B72699C7"}]}`), "MBR partition 1 with a GUID"},
		{"partition signature", answer(`{"table":"MBR","reason":"x","partitions":[{"number":1,"start":0,"size":512,"signature":"zfs"}]}`), "signature type"},
		{"type byte too large", answer(`{"table":"MBR","reason":"x","partitions":[{"number":1,"start":0,"size":512,"mbrType":256}]}`), "not a probe answer"},
		{"FAT partition not in the table", answer(`{"usable":true,"table":"MBR","fat":{"number":1,"start":1048576,"size":2097152},"partitions":[{"number":1,"start":1048576,"size":2097152,"mbrType":131}]}`), "not a partition of the table of a FAT type"},
		{"too many partitions", "printf '{\"table\":\"MBR\",\"reason\":\"x\",\"partitions\":['; i=1; while [ $i -le 1025 ]; do [ $i -gt 1 ] && printf ,; printf '{\"number\":%d,\"start\":%d,\"size\":512}' $i $((i*512)); i=$((i+1)); done; printf ']}'", "1025 partitions, more than 1024"},
		{"number as string", answer(`{"usable":true,"table":"GPT","fat":{"number":"1","start":0,"size":512}}`), "not a probe answer"},
		{"exit status", "echo 'probe-medium: it went wrong' >&2; exit 3", "exit status 3: probe-medium: it went wrong"},
		{"signal", "kill -9 $$", "signal: killed"},
		{"writes without end", "yes", "did not answer within"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, withProber := probePools(mounters.Config{ProbeCommand: hostileProber(t, c.body), ProbeTimeout: 2 * time.Second})
			state, content, reason := withProber.ProbeMedium(d)
			if state != media.StateUnreadable || content != "" || !strings.Contains(reason, c.want) {
				t.Errorf("%s, %q, %q; want unreadable for %q", state, content, reason, c.want)
			}
			if len(reason) > 2*protocol.MaxProbeReason {
				t.Errorf("a reason of %d bytes", len(reason))
			}
		})
	}
	t.Run("well-formed", func(t *testing.T) {
		long := strings.Repeat("é", 3000)
		_, withProber := probePools(mounters.Config{ProbeCommand: hostileProber(t, answer(`{"usable":false,"table":"unknown","whole":"ntfs","reason":"it holds NTFS\u0007\n`+long+`"}`))})
		state, content, reason := withProber.ProbeMedium(d)
		if state != media.StateForeign || content != layout.TypeNTFS || !strings.HasPrefix(reason, "it holds NTFS  éé") {
			t.Errorf("%s, %q, %.40q; want foreign, ntfs, the reason cleaned", state, content, reason)
		}
		if r := []byte(reason); bytes.ContainsAny(r, "\a\n") || len(r) > protocol.MaxProbeReason+100 {
			t.Errorf("reason not cleaned or cut: %d bytes", len(r))
		}
		_, withProber = probePools(mounters.Config{ProbeCommand: hostileProber(t, answer(`{"usable":true,"table":"MBR","fat":{"number":1,"start":1048576,"size":2097152},"partitions":[{"number":1,"start":1048576,"size":2097152,"mbrType":12,"signature":"vfat"},{"number":2,"start":4194304,"size":1048576,"mbrType":131,"signature":"ext4"}]}`))})
		if state, content, reason := withProber.ProbeMedium(d); state != media.StateFAT || content != "partition" || !strings.Contains(reason, "partition 1 (2097152 bytes at 1048576)") {
			t.Errorf("%s, %q, %q; want fat in partition 1", state, content, reason)
		}
	})
}
