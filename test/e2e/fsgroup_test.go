package e2e

import (
	"strings"
	"testing"
)

// TestFSGroup checks that a pod running as an unprivileged user with an fsGroup can create and
// write files in its volume, and that the volume's files carry the fsGroup: FAT keeps no owners,
// so the driver applies the pod's fsGroup as the mount's gid (VOLUME_MOUNT_GROUP).
func TestFSGroup(t *testing.T) {
	e := need(t)
	ns := e.namespace(t)
	e.applyObjects(t, claimObject(ns, "shared", imageClass, "16Mi"))
	e.startPod(t, ns, podSpec{
		name:            "app",
		volumes:         []podVolume{{claim: "shared", path: "/data"}},
		securityContext: map[string]any{"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000},
	})

	ids := strings.Fields(e.sh(t, ns, "app", "id -u; id -g; id -G"))
	if want := []string{"1000", "3000", "3000", "2000"}; strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Fatalf("id in the pod: uid, gid, groups %q, want %q", ids, want)
	}
	got := e.sh(t, ns, "app", "mkdir /data/dir && echo written > /data/dir/file && echo top > /data/top && "+
		"echo more >> /data/top && cat /data/dir/file /data/top")
	if got != "written\ntop\nmore\n" {
		t.Errorf("the pod read back %q", got)
	}

	// ls -ln: mode, links, uid, gid, ... name. Every entry must belong to group 2000 and be
	// writable by it (umask 002), the root of the volume included.
	for _, line := range strings.Split(strings.TrimSpace(e.sh(t, ns, "app", "ls -lnd /data /data/dir /data/dir/file /data/top")), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 {
			t.Errorf("ls -ln line %q", line)
			continue
		}
		name, mode, gid := f[len(f)-1], f[0], f[3]
		if gid != "2000" {
			t.Errorf("%s: gid %s, want the fsGroup 2000 (%s)", name, gid, line)
		}
		if len(mode) < 10 || mode[5] != 'w' {
			t.Errorf("%s: mode %s is not group-writable", name, mode)
		}
	}
}
