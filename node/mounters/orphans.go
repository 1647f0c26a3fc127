package mounters

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/volume"
	"k8s.io/klog/v2"
)

// Adopt takes over the mounter an earlier plugin process started for a staged volume, if it is
// alive and serving at the staging path; its status tells what it serves.
func (l *Launcher) Adopt(rec volume.Record, st *volume.StageRecord) (*Mounter, *protocol.Status, error) {
	p := l.Recorded(st.Mounter, rec.ID)
	if p.pod != nil && p.podCfg == nil {
		return nil, nil, fmt.Errorf("the mounter is pod %s, and this plugin has no API client (--mounter)", p.pod)
	}
	s, err := p.Status(false)
	if err != nil {
		return nil, nil, err
	}
	if !s.Serving || filepath.Clean(s.Mountpoint) != st.Path || s.Volume != rec.ID {
		return nil, nil, fmt.Errorf("mounter %s serves %q at %q (serving=%v), not %s at %s", p, s.Volume, s.Mountpoint, s.Serving, rec.ID, st.Path)
	}
	if err := hostmount.Healthy(st.Path); err != nil {
		return nil, nil, err
	}
	p.pid = s.PID
	if err := p.watch(); err != nil {
		return nil, nil, err
	}
	if p.pod == nil {
		p.watchExit()
	}
	klog.InfoS("adopted mounter", "volume", rec.ID, "mounter", p.String(), "path", st.Path)
	return p, s, nil
}

// Drop ends a recorded mounter that cannot be adopted: it is told to stop, or killed.
func (l *Launcher) Drop(r *volume.MounterRecord, volume string) {
	p := l.Recorded(r, volume)
	_, err := p.Call(&protocol.Request{Op: protocol.OpStop}, time.Second)
	switch {
	case p.pod != nil:
		if p.podCfg != nil {
			p.deletePod()
		}
		return
	case err != nil && isMounterPID(r.PID):
		syscall.Kill(r.PID, syscall.SIGKILL)
	}
	os.Remove(r.Socket)
}

// Staged lists the staged volumes' records, copied, as a Launcher looking for orphans sees them.
type Staged func() []volume.StageRecord

// RemoveOrphans stops every mounter whose socket no staged volume's record names (left
// by a crash between starting it and recording it, or by a record dropped since): its mount is
// unmounted unless a staged volume lives there, and the mounter told to stop (killed if it does
// not answer).
func (l *Launcher) RemoveOrphans(staged Staged) {
	dir := filepath.Join(l.stateDir, mountersDir)
	socks, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
	known := map[string]bool{}
	staging := map[string]bool{}
	for _, st := range staged() {
		staging[st.Path] = true
		if st.Mounter != nil {
			known[st.Mounter.Socket] = true
		}
	}
	for _, sock := range socks {
		if known[sock] {
			continue
		}
		p := &Mounter{socket: sock, gone: make(chan struct{})}
		if !l.stopOrphan(p, staging) {
			klog.InfoS("removing the socket of a mounter that is gone", "socket", sock)
		}
		os.Remove(sock)
	}
	if l.cfg.Pod != nil {
		l.removeOrphanPods(staged)
	}
}

// stopOrphan stops a mounter no staged volume's record names: its mount is unmounted unless a
// staged volume lives there, and it is told to stop (a process is killed if it does not answer).
// It tells whether the mounter answered.
func (l *Launcher) stopOrphan(p *Mounter, staging map[string]bool) bool {
	s, err := p.Status(false)
	if err != nil {
		return false
	}
	klog.InfoS("removing an orphaned mounter", "mounter", p.String(), "pid", s.PID, "volume", s.Volume, "mountpoint", s.Mountpoint)
	if s.Mountpoint != "" && !staging[filepath.Clean(s.Mountpoint)] {
		if err := l.mounts.DetachAll(s.Mountpoint); err != nil {
			klog.ErrorS(err, "unmounting an orphaned mounter's mount", "path", s.Mountpoint)
		}
	}
	if _, err := p.Call(&protocol.Request{Op: protocol.OpStop}, 2*stopWait); err != nil && p.pod == nil && isMounterPID(s.PID) {
		syscall.Kill(s.PID, syscall.SIGKILL)
	}
	return true
}

// checkAdoptable checks a USB device's file system before a volume adopts it: in a mounter
// process of its own in process mode, so that the plugin never parses a medium's structures;
// else in this process. partition names the partition to check ("": the whole
// device, or its first FAT partition). It returns the volume's label.
