package node

import (
	"fmt"

	"github.com/csi-fat/csi-fat/node/hostmount"
	"github.com/csi-fat/csi-fat/node/volume"
	"k8s.io/klog/v2"
)

// Restore brings back what the node-local state says was staged and published before the
// plugin restarted. A volume whose mounter process is alive and serving is adopted, its mounts
// left as they are, and this process gets copies of its connection back; a mounter of another
// version than this plugin's then hands its connection over to a new one (takeover.go). The FUSE servers that ran in the old process died with it (and so did a
// mounter that is gone), leaving dead mounts at the staging paths and at the targets bound to
// them: each such staged volume is served again at its staging path and each target bound
// again, so pods and kubelet find them where they were. Mounters no staged volume names are
// stopped and their mounts removed.
// Records of volumes that no longer exist are dropped and their mounts removed. A volume whose
// device is missing stays recorded and unserved (its condition says so) until NodeStageVolume
// is retried with the device back.
func (m *Manager) Restore() error {
	m.store.Lock()
	volumes := map[string]volume.Record{}
	for name, v := range m.store.Volumes {
		volumes[name] = *v
	}
	staged := map[string]volume.StageRecord{}
	for name, st := range m.store.Staged {
		staged[name] = *st
	}
	published := map[string]volume.PublishRecord{}
	for target, p := range m.store.Published {
		published[target] = *p
	}
	m.store.Unlock()

	var failed []string
	var held []*servedVolume
	for name, st := range staged {
		rec, ok := volumes[name]
		if !ok {
			klog.InfoS("dropping the staging record of a volume that no longer exists", "name", name, "path", st.Path)
			m.forget(func(s *volume.State) { delete(s.Staged, name) }, st.Path)
			continue
		}
		if st.Mounter != nil {
			sv, err := m.adoptMounter(rec, &st)
			if err == nil {
				m.store.Lock()
				m.served[name] = sv
				m.store.Unlock()
				if sv.held != nil {
					held = append(held, sv)
					go m.supervise(sv)
				}
				continue
			}
			klog.InfoS("the mounter of a staged volume cannot be adopted; serving it again", "volume", rec.ID, "pid", st.Mounter.PID, "pod", st.Mounter.Pod, "reason", err)
			m.launcher.Drop(st.Mounter, rec.ID)
		}
		if err := m.stage(rec, &st); err != nil {
			klog.ErrorS(err, "serving a staged volume again", "volume", rec.ID, "path", st.Path)
			failed = append(failed, rec.ID)
		}
	}
	for target, pub := range published {
		st, ok := staged[pub.Name]
		rec, exists := volumes[pub.Name]
		if !exists || !ok {
			klog.InfoS("dropping the publish record of a volume that is not staged", "name", pub.Name, "target", target)
			m.forget(func(s *volume.State) { delete(s.Published, target) }, target)
			continue
		}
		m.store.Lock()
		sv := m.served[pub.Name]
		m.store.Unlock()
		if sv == nil {
			continue // not served: the dead mount stays until the volume is staged again
		}
		if sv.mounter() != nil && !sv.gone() && hostmount.Healthy(target) == nil {
			if mounted, err := m.mounts.IsMountPoint(target); err == nil && mounted {
				continue // an adopted mounter's volume: the bind mount lived on with it
			}
		}
		if err := m.publish(rec.ID, pub.Name, st.Path, target, pub.ReadOnly); err != nil {
			klog.ErrorS(err, "binding a published volume again", "volume", rec.ID, "target", target)
			failed = append(failed, rec.ID+" at "+target)
		}
	}
	m.launcher.RemoveOrphans(m.store.StageRecords)
	if m.launcher.Upgrades() && len(held) > 0 {
		// One volume at a time, after the plugin answers again.
		go m.upgrade(held)
	}
	if len(failed) > 0 {
		return fmt.Errorf("restore: %d volume(s) could not be served again: %v", len(failed), failed)
	}
	return nil
}

// forget drops a record and removes any mount left at path.
func (m *Manager) forget(drop func(*volume.State), path string) {
	if err := m.mounts.DetachAll(path); err != nil {
		klog.ErrorS(err, "removing a stale mount", "path", path)
	}
	m.store.Lock()
	defer m.store.Unlock()
	drop(m.store.State)
	if err := m.saveLocked(); err != nil {
		klog.ErrorS(err, "saving node state")
	}
}
