package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stoppableWriter appends the sync test's records to /data/log, fsyncs after each and only then
// prints its number, until /tmp/stop (in the container, not on the volume) appears; then it
// exits 0. Any failed write or fsync ends it with 1: the pod's phase tells whether it saw an
// error.
const stoppableWriter = `i=0
while [ ! -e /tmp/stop ]; do
	i=$((i+1))
	printf 'record %08d abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU\n' "$i" >> /data/log || exit 1
	sync /data/log || exit 1
	echo "$i"
done`

// writer follows a stoppableWriter pod's reports.
type writer struct {
	e       *environment
	ns, pod string
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	reports chan int
	last    int // the highest record number reported so far
}

// openWriter is stoppableWriter with its log kept open from start to end, a record every 100 ms.
const openWriter = `exec 3>>/data/log || exit 1
i=0
while [ ! -e /tmp/stop ]; do
	i=$((i+1))
	printf 'record %08d abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU\n' "$i" >&3 || exit 1
	sync /data/log || exit 1
	echo "$i"
	sleep 0.1
done`

// startWriter starts a pod running stoppableWriter on claim at /data and follows its reports.
func (e *environment) startWriter(t *testing.T, ns, name, claim string) *writer {
	t.Helper()
	return e.startWriterWith(t, ns, name, claim, stoppableWriter)
}

// startWriterWith starts a pod running script, a writer of records, on claim at /data and
// follows its reports.
func (e *environment) startWriterWith(t *testing.T, ns, name, claim, script string) *writer {
	t.Helper()
	return e.startWriterPod(t, ns, podSpec{name: name, volumes: []podVolume{{claim: claim, path: "/data"}}, script: script})
}

// startWriterPod starts a pod of spec, whose script is a writer of records, and follows its reports.
func (e *environment) startWriterPod(t *testing.T, ns string, spec podSpec) *writer {
	t.Helper()
	name := spec.name
	e.startPod(t, ns, spec)
	ctx, cancel := context.WithCancel(context.Background())
	cmd, stream, err := e.follow(ctx, "logs", "-f", "-n", ns, name)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &writer{e: e, ns: ns, pod: name, cmd: cmd, cancel: cancel, reports: make(chan int, 1024)}
	go func() {
		defer close(w.reports)
		sc := bufio.NewScanner(stream)
		for sc.Scan() {
			if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
				w.reports <- n
			}
		}
	}()
	t.Cleanup(func() {
		w.cancel()
		_ = w.cmd.Wait()
	})
	return w
}

// waitReported waits until the writer has reported record n, fsync'ed, and returns the highest
// number reported by then.
func (w *writer) waitReported(t *testing.T, n int) int {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for w.last < n {
		select {
		case r, ok := <-w.reports:
			if !ok {
				w.e.dump(t, w.ns)
				t.Fatalf("the writer's log ended after record %d, before record %d", w.last, n)
			}
			w.last = max(w.last, r)
		case <-deadline:
			w.e.dump(t, w.ns)
			t.Fatalf("the writer reported %d records in 3 minutes, not %d", w.last, n)
		}
	}
	return w.last
}

// stop asks the writer to finish and waits for it: it must end with exit code 0, having seen no
// error from any write or fsync. It returns the number of records it wrote, its last report.
func (w *writer) stop(t *testing.T) int {
	t.Helper()
	w.e.sh(t, w.ns, w.pod, "touch /tmp/stop")
	var p pod
	w.e.waitFor(t, w.ns, "writer "+w.pod+" to finish", 2*time.Minute, func() (bool, error) {
		p = pod{}
		if err := w.e.getJSON(&p, "pod", "-n", w.ns, w.pod); err != nil {
			return false, err
		}
		switch p.Status.Phase {
		case "Succeeded":
			return true, nil
		case "Failed":
			return false, fmt.Errorf("%w: the writer failed: a write or fsync returned an error", errGiveUp)
		}
		return false, fmt.Errorf("writer is %s", p.Status.Phase)
	})
	// The finished container's whole log, rather than the stream, which may end later.
	w.cancel()
	out := w.e.kubectlT(t, "logs", "-n", w.ns, w.pod)
	lines := strings.Fields(out)
	if len(lines) == 0 {
		t.Fatalf("the writer %s reported nothing", w.pod)
	}
	n, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil || n < w.last {
		t.Fatalf("the writer's last report %q, after %d was followed", lines[len(lines)-1], w.last)
	}
	w.last = n
	return n
}

// checkLog checks a log the writer finished: exactly records 1 to n, whole.
func checkLog(t *testing.T, where string, log []byte, n int) {
	t.Helper()
	checkRecords(t, where, log, n)
	if len(log) != n*recordLen {
		t.Errorf("%s: %d bytes, want %d records of %d bytes", where, len(log), n, recordLen)
	}
}
