package driver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/volume"
)

// app is what an application does on a mount while its mounter is replaced: it appends an
// fsync'ed numbered record to a file it holds open, and reads another file whole in a loop,
// checking its digest. It keeps the first error of each and the longest any one round took
// (the pause it saw).
type app struct {
	stop chan struct{}
	wg   sync.WaitGroup
	// record is held from a record's write to its fsync's answer: a crash there loses a write
	// the server acknowledged, which its writer learns as EIO once, by design.
	record sync.Mutex

	mu                    sync.Mutex
	records               int // fsync'ed
	writeErr, readErr     error
	reads                 int
	writePause, readPause time.Duration
	ops                   []appOp
	firstErrAt            time.Time
}

// appOp is one round of the application: a record's write and fsync, or a whole read.
type appOp struct {
	start time.Time
	took  time.Duration
}

// pause is the longest round under way at some time from from to to (the pause the
// application saw at an event then), and the longest of those that ended before.
func (a *app) pause(from, to time.Time) (during, before time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range a.ops {
		end := o.start.Add(o.took)
		switch {
		case end.Before(from):
			before = max(before, o.took)
		case !o.start.After(to):
			during = max(during, o.took)
		}
	}
	return during, before
}

// startApp writes records to log and reads data (whose content is want) on the mount.
func startApp(t *testing.T, log, data string, want []byte) *app {
	t.Helper()
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	a := &app{stop: make(chan struct{})}
	sum := sha256.Sum256(want)
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		defer f.Close()
		for i := 0; ; i++ {
			select {
			case <-a.stop:
				return
			default:
			}
			a.record.Lock()
			start := time.Now()
			_, err := fmt.Fprintf(f, "record %06d\n", i)
			if err == nil {
				err = f.Sync()
			}
			took := time.Since(start)
			a.record.Unlock()
			a.mu.Lock()
			a.ops = append(a.ops, appOp{start, took})
			a.writePause = max(a.writePause, took)
			if err != nil {
				a.writeErr = err
				if a.firstErrAt.IsZero() {
					a.firstErrAt = time.Now()
				}
				a.mu.Unlock()
				return
			}
			a.records = i + 1
			a.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	go func() {
		defer a.wg.Done()
		for {
			select {
			case <-a.stop:
				return
			default:
			}
			start := time.Now()
			got, err := os.ReadFile(data)
			if err == nil && sha256.Sum256(got) != sum {
				err = fmt.Errorf("%s: %d bytes read, not what was written", data, len(got))
			}
			took := time.Since(start)
			a.mu.Lock()
			a.ops = append(a.ops, appOp{start, took})
			a.readPause = max(a.readPause, took)
			if err != nil {
				a.readErr = err
				if a.firstErrAt.IsZero() {
					a.firstErrAt = time.Now()
				}
				a.mu.Unlock()
				return
			}
			a.reads++
			a.mu.Unlock()
		}
	}()
	return a
}

// state reads what the application has done so far.
func (a *app) state() (records, reads int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	err = a.writeErr
	if err == nil {
		err = a.readErr
	}
	return a.records, a.reads, err
}

// end stops the application; it fails the test if either loop saw an error.
func (a *app) end(t *testing.T) (records int) {
	t.Helper()
	close(a.stop)
	a.wg.Wait()
	if a.writeErr != nil || a.readErr != nil {
		t.Fatalf("the application saw errors after %d records and %d reads: writing %v, reading %v", a.records, a.reads, a.writeErr, a.readErr)
	}
	t.Logf("application: %d records, %d reads; longest write+fsync %v, longest whole read %v", a.records, a.reads, a.writePause, a.readPause)
	return a.records
}

// progress waits until the application has done more than it had, or fails the test.
func (a *app) progress(t *testing.T, within time.Duration) {
	t.Helper()
	r0, n0, _ := a.state()
	deadline := time.Now().Add(within)
	for {
		r, n, err := a.state()
		if err != nil {
			t.Fatalf("the application failed: %v", err)
		}
		if r > r0+5 && n > n0+1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the application made no progress within %v: records %d→%d, reads %d→%d", within, r0, r, n0, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// betweenRecords runs kill while the writer has no record unflushed: a record written and not
// yet fsync'ed when its server dies is lost and its writer told so with EIO, by design (what the
// application must not see is an error for what it had fsync'ed, or a read failing).
func (a *app) betweenRecords(kill func() error) error {
	a.record.Lock()
	defer a.record.Unlock()
	return kill()
}

// killMounter SIGKILLs the mounter between two of the application's records.
func killMounter(t *testing.T, a *app, pid int) {
	t.Helper()
	if err := a.betweenRecords(func() error { return syscall.Kill(pid, syscall.SIGKILL) }); err != nil {
		t.Fatal(err)
	}
}

// killLater SIGKILLs, at the test's end, the mounter serving the volume then, if any, and
// detaches what is left mounted under dir (a test that failed with a child driver).
func killLater(t *testing.T, dir, name string) {
	t.Cleanup(func() {
		data, err := os.ReadFile(filepath.Join(dir, "state", volume.StateFile))
		var st volume.State
		if err == nil && json.Unmarshal(data, &st) == nil {
			if s := st.Staged[name]; s != nil && s.Mounter != nil && s.Mounter.PID > 0 {
				syscall.Kill(s.Mounter.PID, syscall.SIGKILL)
			}
		}
		detachUnder(t, dir)
	})
}

// appData writes the file the application reads: 4 MiB of random bytes, fsync'ed.
func appData(t *testing.T, path string) []byte {
	t.Helper()
	b := make([]byte, 4<<20)
	rand.Read(b)
	writeSynced(t, path, string(b))
	return b
}

// replaced waits until the volume's recorded mounter is another live one than pid's, and
// returns its pid.
func replaced(t *testing.T, dir, name string, pid int, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if mr := stagedMounter(t, dir, name); mr.PID != pid && alive(mr.PID) {
			return mr.PID
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mounter (pid %d) of %s was not replaced within %v", pid, name, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unstageAndCheck unpublishes and unstages the volume and checks its image: fsck.fat finds
// nothing, and log.txt holds every fsync'ed record.
func unstageAndCheck(t *testing.T, nc csi.NodeClient, dir, name, id, staging string, targets []string, records int) {
	t.Helper()
	ctx := context.Background()
	for _, p := range targets {
		if _, err := nc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: p}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "pool", name+".img")
	if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil {
		t.Fatalf("fsck.fat -n after unstage: %v\n%s", err, out)
	}
	out, err := exec.Command("mtype", "-i", img, "::/log.txt").Output()
	if err != nil {
		t.Fatalf("mtype log.txt: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) < records {
		t.Fatalf("log.txt holds %d records, %d were fsync'ed", len(lines), records)
	}
	for i := 0; i < records; i++ {
		if lines[i] != fmt.Sprintf("record %06d", i) {
			t.Fatalf("log.txt: record %d reads %q", i, lines[i])
		}
	}
}

// conditionOf reads the volume's condition at path.
func conditionOf(t *testing.T, nc csi.NodeClient, id, path string) *csi.VolumeCondition {
	t.Helper()
	stats, err := nc.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
	if err != nil {
		t.Fatal(err)
	}
	return stats.GetVolumeCondition()
}

// heldBy lists what process pid has open of the volume's connection: /dev/fuse descriptors,
// state memfds (with their bytes), and descriptors of the image.
func heldBy(t *testing.T, pid int, image string) (fuse, state, images int, stateBytes int64) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		switch {
		case target == "/dev/fuse":
			fuse++
		case strings.HasPrefix(target, "/memfd:csi-fat-state"):
			state++
			if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil {
				stateBytes += fi.Size()
			}
		case target == image:
			images++
		}
	}
	return
}

// TestMounterKilledConnectionTakenOver: a mounter SIGKILLed while an application writes and
// reads is replaced by a new one, which takes the live connection over: the application sees
// no error, every fsync'ed record is there, and the file system is clean.
func TestMounterKilledConnectionTakenOver(t *testing.T) {
	requireFUSE(t)
	td := startDriver(t, "", withMounters)
	dir := td.dir
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	id := stagePublish(t, td.ctrl, td.node, "phoenix", staging, target)
	data := appData(t, filepath.Join(target, "data.bin"))
	// Files the kernel has looked up, whose node IDs the state holds.
	for i := range 200 {
		writeSynced(t, filepath.Join(target, fmt.Sprintf("f%03d.txt", i)), "x\n")
	}
	a := startApp(t, filepath.Join(target, "log.txt"), filepath.Join(target, "data.bin"), data)
	a.progress(t, 5*time.Second)
	// The plugin (this process) holds the connection: its /dev/fuse descriptor, the image and
	// its O_DIRECT twin, and the state descriptor the server keeps its tables in.
	img := filepath.Join(dir, "pool", "phoenix.img")
	fuse, state, images, stateBytes := heldBy(t, os.Getpid(), img)
	if fuse != 1 || state != 1 || images != 2 {
		t.Fatalf("the plugin holds %d FUSE, %d state and %d image descriptors; want 1, 1 and 2", fuse, state, images)
	}
	t.Logf("the plugin holds 4 descriptors for the volume; its state descriptor has %d bytes (202 files, 2 open)", stateBytes)
	mr := stagedMounter(t, dir, "phoenix")
	killed := time.Now()
	killMounter(t, a, mr.PID)
	pid := replaced(t, dir, "phoenix", mr.PID, 20*time.Second)
	replacedAt := time.Now()
	t.Logf("mounter %d killed; %d serves the connection %v later", mr.PID, pid, time.Since(killed))
	a.progress(t, 10*time.Second)
	during, before := a.pause(killed, replacedAt)
	t.Logf("pause: the longest round under way from the kill to the new mounter took %v (before: %v at most)", during, before)
	n := a.end(t)
	if c := conditionOf(t, td.node, id, target); c.GetAbnormal() {
		t.Fatalf("condition after the takeover: %v", c)
	}
	unstageAndCheck(t, td.node, dir, "phoenix", id, staging, []string{target}, n)
	waitGone(t, pid)
}

// TestPluginRestartThenMounterKilled: the plugin is killed and started again, gets its copies
// of the connection back from the mounter it adopts, and then the mounter is killed: a new one
// takes the connection over; then the same again with the mounter that took over. The
// application sees no error.
func TestPluginRestartThenMounterKilled(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	killLater(t, dir, "phoenix")
	c := startChild(t, dir, withMounters)
	id := stagePublish(t, c.ctrl, c.node, "phoenix", staging, target)
	data := appData(t, filepath.Join(target, "data.bin"))
	a := startApp(t, filepath.Join(target, "log.txt"), filepath.Join(target, "data.bin"), data)
	mr := stagedMounter(t, dir, "phoenix")
	a.progress(t, 5*time.Second)
	c.end(t, syscall.SIGKILL)
	a.progress(t, 5*time.Second)
	c = startChild(t, dir, withMounters)
	if again := stagedMounter(t, dir, "phoenix"); again.PID != mr.PID {
		t.Fatalf("restart replaced mounter %d by %d", mr.PID, again.PID)
	}
	killed := time.Now()
	killMounter(t, a, mr.PID)
	pid := replaced(t, dir, "phoenix", mr.PID, 20*time.Second)
	replacedAt := time.Now()
	t.Logf("mounter %d killed; %d serves the connection %v later", mr.PID, pid, time.Since(killed))
	a.progress(t, 10*time.Second)
	during, before := a.pause(killed, replacedAt)
	t.Logf("pause: the longest round under way from the kill to the new mounter took %v (before: %v at most)", during, before)
	// The other way round: the mounter that took over outlives the plugin's next crash, and the
	// plugin after it holds its connection again.
	c.end(t, syscall.SIGKILL)
	a.progress(t, 5*time.Second)
	c = startChild(t, dir, withMounters)
	if again := stagedMounter(t, dir, "phoenix"); again.PID != pid {
		t.Fatalf("restart replaced mounter %d by %d", pid, again.PID)
	}
	killMounter(t, a, pid)
	pid = replaced(t, dir, "phoenix", pid, 20*time.Second)
	a.progress(t, 10*time.Second)
	n := a.end(t)
	unstageAndCheck(t, c.node, dir, "phoenix", id, staging, []string{target}, n)
	waitGone(t, pid)
	c.end(t, syscall.SIGTERM)
}

// TestTakeoverGivenUp: a volume whose new mounters die at every takeover (the mounter's test
// fault stands in for a medium that kills every server) is given up after the bounded tries:
// its application gets an error, not a hang, within givenUpWithin; its condition says why; the
// node's other volume carries on; and the volume is served afresh at its staging path and
// target, with what was fsync'ed.
func TestTakeoverGivenUp(t *testing.T) {
	requireFUSE(t)
	const givenUpWithin = 15 * time.Second
	td := startDriver(t, "", withMounters)
	dir := td.dir
	idA := stagePublish(t, td.ctrl, td.node, "doomed", filepath.Join(dir, "sa"), filepath.Join(dir, "ta"))
	idB := stagePublish(t, td.ctrl, td.node, "bystander", filepath.Join(dir, "sb"), filepath.Join(dir, "tb"))
	writeSynced(t, filepath.Join(dir, "ta", "kept.txt"), "fsync'ed\n")
	dataA := appData(t, filepath.Join(dir, "ta", "data.bin"))
	dataB := appData(t, filepath.Join(dir, "tb", "data.bin"))
	doomed := startApp(t, filepath.Join(dir, "ta", "log.txt"), filepath.Join(dir, "ta", "data.bin"), dataA)
	bystander := startApp(t, filepath.Join(dir, "tb", "log.txt"), filepath.Join(dir, "tb", "data.bin"), dataB)
	doomed.progress(t, 5*time.Second)
	t.Setenv(protocol.FaultEnv, "resume-panic:doomed")
	ma := stagedMounter(t, dir, "doomed")
	killed := time.Now()
	killMounter(t, doomed, ma.PID)
	for {
		if _, _, err := doomed.state(); err != nil {
			t.Logf("the application on the given-up volume got %v %v after the kill", err, time.Since(killed))
			break
		}
		if time.Since(killed) > givenUpWithin {
			t.Fatalf("the application on the volume whose mounters keep dying got no error within %v", givenUpWithin)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(doomed.stop)
	doomed.wg.Wait()
	// Served afresh: the target works again, with what was fsync'ed, and the condition says
	// what happened.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := os.ReadFile(filepath.Join(dir, "ta", "kept.txt"))
		if err == nil && string(got) == "fsync'ed\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the given-up volume is not served afresh at its target: %q, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got, err := os.ReadFile(filepath.Join(dir, "ta", "data.bin"))
	if err != nil || !bytes.Equal(got, dataA) {
		t.Fatalf("data.bin after serving afresh: %d bytes, %v", len(got), err)
	}
	c := conditionOf(t, td.node, idA, filepath.Join(dir, "ta"))
	if !c.GetAbnormal() || !strings.Contains(c.GetMessage(), "gave up") || !strings.Contains(c.GetMessage(), "killed") {
		t.Fatalf("condition of the given-up volume: %v", c)
	}
	t.Logf("condition: %s", c.GetMessage())
	// The log it names, with the failed mounters' panics, is there to read.
	if m := regexp.MustCompile(`see (/\S+\.log)`).FindStringSubmatch(c.GetMessage()); m == nil {
		t.Fatalf("the condition names no log: %s", c.GetMessage())
	} else if b, err := os.ReadFile(m[1]); err != nil || !strings.Contains(string(b), "test fault: resume-panic") {
		t.Fatalf("the log %s the condition names: %v; holds the test fault's panic: %v", m[1], err, strings.Contains(string(b), "resume-panic"))
	}
	n := bystander.end(t)
	if c := conditionOf(t, td.node, idB, filepath.Join(dir, "tb")); c.GetAbnormal() {
		t.Fatalf("the other volume's condition: %v", c)
	}
	unstageAndCheck(t, td.node, dir, "bystander", idB, filepath.Join(dir, "sb"), []string{filepath.Join(dir, "tb")}, n)
	doomed.mu.Lock()
	records := doomed.records
	doomed.mu.Unlock()
	unstageAndCheck(t, td.node, dir, "doomed", idA, filepath.Join(dir, "sa"), []string{filepath.Join(dir, "ta")}, records)
}

// TestUpgradeHandOver: a plugin that adopts a mounter of another version (the test hook stands
// in for an older build) hands its connection over to a mounter of its own while an application
// writes and reads (unless upgrades are off): the application sees no error, every fsync'ed
// record is there, and the file system is clean.
func TestUpgradeHandOver(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	killLater(t, dir, "phoenix")
	t.Setenv(protocol.VersionEnv, "v0-old")
	c := startChild(t, dir, withMounters)
	id := stagePublish(t, c.ctrl, c.node, "phoenix", staging, target)
	mr := stagedMounter(t, dir, "phoenix")
	data := appData(t, filepath.Join(target, "data.bin"))
	a := startApp(t, filepath.Join(target, "log.txt"), filepath.Join(target, "data.bin"), data)
	a.progress(t, 5*time.Second)
	c.end(t, syscall.SIGTERM)
	os.Unsetenv(protocol.VersionEnv) // the new plugin's mounters are its own version
	// With upgrades off, the old mounter serves on.
	c = startChild(t, dir, withMounters, func(c *Config) { c.Node.Mounter.NoUpgrade = true })
	time.Sleep(2 * time.Second)
	if again := stagedMounter(t, dir, "phoenix"); again.PID != mr.PID || !alive(mr.PID) {
		t.Fatalf("with upgrades off, mounter %d was replaced by %d", mr.PID, again.PID)
	}
	c.end(t, syscall.SIGTERM)
	started := time.Now()
	c = startChild(t, dir, withMounters)
	pid := replaced(t, dir, "phoenix", mr.PID, 20*time.Second)
	handed := time.Now()
	t.Logf("mounter %d of v0-old handed over to %d, %v after the plugin started", mr.PID, pid, time.Since(started))
	waitGone(t, mr.PID)
	a.progress(t, 10*time.Second)
	during, before := a.pause(started, handed)
	t.Logf("pause: the longest round under way from the plugin's start to the new mounter took %v (before: %v at most)", during, before)
	n := a.end(t)
	unstageAndCheck(t, c.node, dir, "phoenix", id, staging, []string{target}, n)
	waitGone(t, pid)
	c.end(t, syscall.SIGTERM)
}
