package node

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/serving"
	"github.com/csi-fat/csi-fat/node/volume"
)

// A held volume (servedVolume.held) keeps its FUSE connection in this process as well as in its
// mounter: when the mounter dies, the kernel keeps the connection and the mount, applications'
// requests wait, and a new mounter takes the connection over (check and repair first, then
// fatfuse's takeover from the state descriptor). When mounters keep dying, the connection is
// given up: aborted, so that applications get errors instead of waiting, and the volume served
// afresh at its staging path and bound again at its targets.
const (
	// takeoverEnds: a volume whose mounters end (die, or fail to take the connection over) more
	// than this many times within takeoverWindow is given up. A medium that kills every server at
	// the same request, or a mounter that cannot start, would otherwise keep applications
	// waiting for ever; three tries outlast a passing cause (an OOM kill under a burst).
	takeoverEnds   = 3
	takeoverWindow = 2 * time.Minute
	// takeoverPause is the wait between two tries, so that a mounter that dies at once does not
	// spin.
	takeoverPause = 250 * time.Millisecond
	// lostReport is how long the condition of a volume served afresh still says that its
	// earlier connection was given up (applications saw errors).
	lostReport = 10 * time.Minute
	// lockWait bounds how long a restaging waits for another operation on the volume.
	lockWait = 30 * time.Second
	// takeoverCheckLimit bounds the check before a takeover (below the staging's
	// CheckTimeout): applications wait meanwhile, and the checker reads a million files in
	// seconds, so a check of a volume served moments before that takes longer is a failed try.
	takeoverCheckLimit = 2 * time.Minute
)

// supervise waits for the held volume's mounter to end and has a new one take its connection
// over, until the volume is stopped or given up.
func (m *Manager) supervise(sv *servedVolume) {
	for {
		p := sv.mounter()
		<-p.Dead()
		sv.takeover.Lock()
		sv.mu.Lock()
		stopping, current := sv.stopping, sv.remote
		sv.mu.Unlock()
		if stopping {
			sv.takeover.Unlock()
			return
		}
		if current != p {
			sv.takeover.Unlock()
			continue // replaced by a hand-over
		}
		klog.InfoS("the mounter of a held volume ended; a new one takes its connection over", "volume", sv.id, "mounter", p.String())
		givenUp := m.replace(sv, p)
		sv.takeover.Unlock()
		if givenUp {
			m.serveAfresh(sv)
			return
		}
	}
}

// replace starts mounters until one takes the connection over, or gives the connection up when
// too many ended lately; it tells whether it gave up. The caller holds sv.takeover.
func (m *Manager) replace(sv *servedVolume, dead *mounters.Mounter) (givenUp bool) {
	why := ""
	for tries := 0; ; tries++ {
		// Tries in a row count too: tries slower than the window would never add up in it.
		if n := sv.ended(); n > takeoverEnds || tries >= takeoverEnds {
			// How the first one ended is known by now (a pod's status is read meanwhile).
			death := dead.EndedWhy()
			if death == "" {
				death = fmt.Sprintf("its mounter (%s) ended", dead)
			}
			m.giveUp(sv, fmt.Sprintf("gave up the volume's FUSE connection: %s; its mounters ended %d times within %v and %d tries in a row to take the connection over failed (the last: %s); what was open on the mount failed, and the volume is served afresh", death, n, takeoverWindow, tries, why))
			return true
		}
		start := time.Now()
		p, err := m.takeOver(sv)
		if err == nil {
			klog.InfoS("a new mounter took the connection over", "volume", sv.id, "mounter", p.String(), "took", time.Since(start))
			return false
		}
		why = err.Error()
		klog.ErrorS(err, "taking the connection over", "volume", sv.id)
		time.Sleep(takeoverPause)
	}
}

// ended records that a mounter of the volume ended now and counts those within the window.
func (sv *servedVolume) ended() int {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	now := time.Now()
	kept := sv.ends[:0]
	for _, t := range sv.ends {
		if now.Sub(t) < takeoverWindow {
			kept = append(kept, t)
		}
	}
	sv.ends = append(kept, now)
	return len(sv.ends)
}

// takeOver starts a mounter and has it take the volume's live connection over: it checks (and
// repairs) the volume first, then serves it from the state the previous server left. The
// previous mounter is gone (it died, or handed over). The caller holds sv.takeover.
func (m *Manager) takeOver(sv *servedVolume) (*mounters.Mounter, error) {
	rec, st, err := m.servedRecords(sv.name)
	if err != nil {
		return nil, err
	}
	p, err := m.launcher.StartNext(rec)
	if err != nil {
		return nil, fmt.Errorf("volume %s: start a mounter: %w", rec.ID, err)
	}
	if err := m.resume(sv, p, rec, st); err != nil {
		p.Kill() // its log, the volume's, stays: the condition names it
		return nil, err
	}
	return p, nil
}

// resume has the mounter p check the volume on the held device and take the held connection
// over, then makes it the volume's mounter and records it.
func (m *Manager) resume(sv *servedVolume, p *mounters.Mounter, rec volume.Record, st volume.StageRecord) error {
	h := sv.held
	ended := func(err error) error {
		var re *protocol.RemoteError
		if !errors.As(err, &re) && p.Settle() {
			return fmt.Errorf("%v (%s)", err, p.EndedWhy())
		}
		return err
	}
	resp, err := p.Call(&protocol.Request{Op: protocol.OpCheck, Check: m.checkArgs(rec, st.ReadOnly)}, min(m.cfg.Mounter.CheckLimit(), takeoverCheckLimit), int(h.Device.Fd()))
	if err != nil {
		return fmt.Errorf("volume %s: checking the file system before the takeover: %w", rec.ID, ended(err))
	}
	forceReadOnly, damage, err := serving.JudgeCheck(rec, resp.Check, st.ReadOnly)
	if err != nil {
		return err
	}
	optString, err := serving.MountOptionString(st.MountFlags, st.MountGroup, st.ReadOnly)
	if err != nil {
		return err
	}
	if forceReadOnly && !st.ReadOnly {
		optString += ",ro"
	}
	source, err := m.devicePath(rec)
	if err != nil {
		source = rec.Device
	}
	args := m.serveArgs(rec, st.Path, source, optString, damage)
	args.Direct, args.State, args.Resume = h.Direct != nil, true, true
	if _, err := p.Call(&protocol.Request{Op: protocol.OpServe, Serve: args}, mounters.ServeTimeout, h.FDs()...); err != nil {
		return fmt.Errorf("volume %s: taking over its connection at %s: %w", rec.ID, st.Path, ended(err))
	}
	sv.mu.Lock()
	old := sv.remote
	sv.remote, sv.damage = p, damage
	sv.mu.Unlock()
	m.store.Lock()
	if cur := m.store.Staged[sv.name]; cur != nil {
		cur.Mounter = p.Record()
		if err := m.saveLocked(); err != nil {
			klog.ErrorS(err, "recording the mounter that took the connection over", "volume", sv.id)
		}
	}
	m.store.Unlock()
	// A pod's deletion waits for it to be gone: nothing else needs to.
	go old.Retire()
	return nil
}

// servedRecords copies the records of a staged volume.
func (m *Manager) servedRecords(name string) (volume.Record, volume.StageRecord, error) {
	m.store.Lock()
	defer m.store.Unlock()
	rec, st := m.store.Volumes[name], m.store.Staged[name]
	if rec == nil || st == nil {
		return volume.Record{}, volume.StageRecord{}, fmt.Errorf("volume %s is no longer staged", name)
	}
	return *rec, *st, nil
}

// giveUp aborts the volume's connection, so that every application waiting on it, and every
// later request, gets an error instead of waiting for a server that will not come.
func (m *Manager) giveUp(sv *servedVolume, why string) {
	klog.ErrorS(errors.New(why), "giving up a FUSE connection", "volume", sv.id, "path", sv.path)
	sv.mu.Lock()
	sv.givenUp = why
	sv.mu.Unlock()
	if err := m.mounts.AbortFUSE(sv.path); err != nil {
		klog.ErrorS(err, "aborting the connection; closing this process's copy ends it once no mounter holds it", "volume", sv.id)
	}
	sv.held.Close()
}

// serveAfresh serves a volume whose connection was given up anew at its staging path (a new
// mount, after the check and repair) and binds it again at every target, so that a container
// the kubelet restarts finds a working mount.
func (m *Manager) serveAfresh(sv *servedVolume) {
	var unlock func()
	for deadline := time.Now().Add(lockWait); ; {
		var err error
		if unlock, err = m.locks.Take(sv.name, "serving afresh"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			klog.ErrorS(err, "serving afresh a volume whose connection was given up: the next NodePublishVolume will", "volume", sv.id)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer unlock()
	rec, st, err := m.servedRecords(sv.name)
	if err != nil {
		return
	}
	m.store.Lock()
	current := m.served[sv.name]
	targets := m.store.TargetsOf(sv.name)
	published := map[string]bool{}
	for _, t := range targets {
		published[t] = m.store.Published[t].ReadOnly
	}
	m.store.Unlock()
	if current == sv {
		if err := m.stage(rec, &st); err != nil {
			klog.ErrorS(err, "serving afresh a volume whose connection was given up; the next NodePublishVolume tries again", "volume", sv.id)
			m.store.Lock()
			if m.served[sv.name] == nil {
				m.served[sv.name] = sv // gone: NodePublishVolume serves it again
			}
			m.store.Unlock()
			return
		}
	}
	m.store.Lock()
	if fresh := m.served[sv.name]; fresh != nil {
		fresh.mu.Lock()
		fresh.lost, fresh.lostUntil = sv.givenUp, time.Now().Add(lostReport)
		fresh.mu.Unlock()
	}
	m.store.Unlock()
	for _, t := range targets {
		if err := m.publish(rec.ID, sv.name, st.Path, t, published[t]); err != nil {
			klog.ErrorS(err, "binding again a volume served afresh", "volume", sv.id, "target", t)
		}
	}
	klog.InfoS("served afresh a volume whose connection was given up", "volume", sv.id, "targets", len(targets))
}

// stopMounter unstages a mounter's volume: no takeover follows the mounter's end. If the
// mount is busy, it serves on, still held.
func (sv *servedVolume) stopMounter() error {
	sv.takeover.Lock()
	sv.mu.Lock()
	sv.stopping = true
	p, givenUp := sv.remote, sv.givenUp != ""
	sv.mu.Unlock()
	sv.takeover.Unlock()
	if givenUp {
		// Its mounters are dead and its connection aborted: take the dead mount away, and leave
		// the log its condition names (unstaging removes it).
		if err := hostmount.NewTable().DetachAll(sv.path); err != nil {
			return err
		}
		p.Retire()
		return nil
	}
	err := p.Stop(sv.path)
	if err != nil && !p.IsGone() {
		sv.mu.Lock()
		sv.stopping = false
		sv.mu.Unlock()
		return err
	}
	sv.held.Close()
	return err
}

// holdAdopted gets back the copies of an adopted mounter's connection, which this process lost
// when it restarted; a mounter that cannot give them (older than the operation) serves on
// unheld, as before.
func (m *Manager) holdAdopted(sv *servedVolume) {
	h, err := sv.mounter().Descriptors()
	if err != nil {
		klog.InfoS("the adopted mounter's connection is not held: its death would end the mount", "volume", sv.id, "reason", err)
		return
	}
	sv.held = h
}

// upgrade replaces, one volume at a time, the held volumes' mounters that run another version
// than this plugin's by a hand-over.
func (m *Manager) upgrade(svs []*servedVolume) {
	want := m.launcher.Version()
	for _, sv := range svs {
		p := sv.mounter()
		have, err := p.Build()
		if err != nil {
			klog.ErrorS(err, "asking a mounter's version", "volume", sv.id)
			continue
		}
		if have == want || sv.held == nil {
			if have != want {
				klog.InfoS("a mounter of another version serves on: its connection is not held", "volume", sv.id, "version", versionName(have), "want", want)
			}
			continue
		}
		start := time.Now()
		if err := m.handOver(sv); err != nil {
			klog.ErrorS(err, "upgrading a mounter by a hand-over", "volume", sv.id, "from", versionName(have), "to", want)
			continue
		}
		klog.InfoS("upgraded a mounter by a hand-over", "volume", sv.id, "from", versionName(have), "to", want, "took", time.Since(start))
	}
}

func versionName(v string) string {
	if v == "" {
		return "(too old to say)"
	}
	return v
}

// handOver replaces a held volume's live mounter by a new one: the new one is started and
// listening first, then the old one stops serving (everything answered and written back, the
// state complete) and exits, and the new one checks the volume and takes the connection over.
// A new mounter that fails leaves the connection to the takeover that follows a death.
func (m *Manager) handOver(sv *servedVolume) error {
	sv.takeover.Lock()
	defer sv.takeover.Unlock()
	sv.mu.Lock()
	old, stopping := sv.remote, sv.stopping || sv.givenUp != ""
	sv.mu.Unlock()
	if stopping || old.IsGone() {
		return fmt.Errorf("volume %s is not served by a live mounter", sv.id)
	}
	rec, st, err := m.servedRecords(sv.name)
	if err != nil {
		return err
	}
	p, err := m.launcher.StartNext(rec)
	if err != nil {
		return fmt.Errorf("volume %s: start a mounter: %w", rec.ID, err)
	}
	paused := time.Now()
	if err := old.HandOver(); err != nil {
		// If it went anyway, the takeover that follows a death picks its connection up.
		p.Kill()
		return err
	}
	if err := m.resume(sv, p, rec, st); err != nil {
		p.Kill()
		// The old mounter is gone: the supervisor, once this returns, takes over as after a death.
		return err
	}
	klog.InfoS("handed a connection over", "volume", sv.id, "from", old.String(), "to", p.String(), "paused", time.Since(paused))
	return nil
}
