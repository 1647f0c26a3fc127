package serving

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/volume"
)

// What the check before serving decides (whoever ran it: a mounter, or the engine in this
// process) and the mount options a staged volume is served with.

// maxListedProblems bounds the problems quoted in a log line, an error or a volume condition.
const maxListedProblems = 5

// Repairs tells whether the check before serving may repair: not for a read-only staging, nor
// under onDamage=readonly.
func Repairs(rec volume.Record, readOnly bool) bool {
	return !readOnly && rec.Params.OnDamagePolicy() != volume.OnDamageReadOnly
}

// JudgeCheck applies the volume's onDamage policy to what the check found.
func JudgeCheck(rec volume.Record, res *protocol.CheckResult, readOnly bool) (forceReadOnly bool, why string, err error) {
	policy := rec.Params.OnDamagePolicy()
	if len(res.Repaired) > 0 {
		klog.Warningf("volume %s was not cleanly unmounted or was damaged; repaired before serving (as fsck.fat -a would): %s",
			rec.ID, ListProblems(res.Repaired, len(res.Repaired)))
	}
	if res.Clean {
		return false, "", nil
	}
	left := ListProblems(res.Left, res.Total)
	if policy == volume.OnDamageFail && res.Unrepairable {
		written := "nothing was written"
		if len(res.Repaired) > 0 {
			written = "what was safe to repair was repaired"
		}
		return false, "", status.Errorf(codes.FailedPrecondition,
			"volume %s: the file system has errors that are not safe to repair automatically (%s=%s), %s: %s; repair it with fsck.fat",
			rec.ID, volume.ParamOnDamage, policy, written, left)
	}
	why = fmt.Sprintf("served read-only: the file system has errors that were not repaired (%s=%s): %s", volume.ParamOnDamage, policy, left)
	if readOnly {
		why = fmt.Sprintf("staged read-only with file system errors that were not repaired: %s", left)
	}
	klog.Warningf("volume %s: %s", rec.ID, why)
	return true, why, nil
}

// ListProblems quotes the first problems of total and counts the rest.
func ListProblems(ps []string, total int) string {
	total = max(total, len(ps))
	var b strings.Builder
	for i, p := range ps {
		if i == maxListedProblems {
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p)
	}
	if n := min(len(ps), maxListedProblems); total > n {
		fmt.Fprintf(&b, "; and %d more", total-n)
	}
	return b.String()
}

// MountOptions builds the FUSE mount options for staging: the StorageClass's mount options,
// then what the driver decides. A mount group (the pod's fsGroup) becomes the owner group of
// every file, since FAT records no owners, and unless the mount options set masks the group may
// write, as Kubernetes expects of an fsGroup volume. allow_other is always on: pods run as
// other users than the driver.
func MountOptions(flags []string, group string, readOnly bool) (mountopt.Options, error) {
	s, err := MountOptionString(flags, group, readOnly)
	if err != nil {
		return mountopt.Options{}, err
	}
	return mountopt.ParseOptions(s)
}

// MountOptionString is MountOptions as a -o string, as a mounter process is handed it.
func MountOptionString(flags []string, group string, readOnly bool) (string, error) {
	var opts []string
	masks := false
	for _, f := range flags {
		for _, o := range strings.Split(f, ",") {
			o = strings.TrimSpace(o)
			if o == "" {
				continue
			}
			key, _, _ := strings.Cut(o, "=")
			if key == "umask" || key == "dmask" || key == "fmask" {
				masks = true
			}
			opts = append(opts, o)
		}
	}
	if group != "" {
		gid, err := strconv.ParseUint(group, 10, 32)
		if err != nil {
			return "", fmt.Errorf("volume mount group %q is not a numeric group ID", group)
		}
		opts = append(opts, "gid="+strconv.FormatUint(gid, 10))
		if !masks {
			opts = append(opts, "umask=002")
		}
	}
	opts = append(opts, "allow_other")
	if readOnly {
		opts = append(opts, "ro")
	}
	return strings.Join(opts, ","), nil
}
