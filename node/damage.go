package node

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/volume"
)

// maxListedProblems bounds the problems quoted in a log line, an error or a volume condition.
const maxListedProblems = 5

// checkBeforeServing checks the file system on devPath before it is served, in this process,
// and repairs what fsck.Repair repairs safely unless the volume is to be served read-only or the
// volume's onDamage policy is readonly. It answers whether the volume must be served read-only
// and, when so, why (the volume condition's message); with onDamage=fail, errors that are left
// make it a FailedPrecondition error instead. A mounter process runs the same check
// (mounter.Check, as m.cfg.InProcess.Check) on the descriptor it is handed, and judgeCheck judges both.
func (m *Manager) checkBeforeServing(open opener, rec volume.Record, devPath string, readOnly bool) (forceReadOnly bool, why string, err error) {
	repair := repairs(rec, readOnly)
	claim := blockdev.ExclusiveReadOnly
	if repair {
		claim = blockdev.Exclusive
	}
	dev, err := open(claim)
	if err != nil {
		return false, "", status.Errorf(claimCode(err, codes.Internal), "volume %s: open %s to check it: %v", rec.ID, devPath, err)
	}
	defer dev.Close()
	res, err := m.cfg.InProcess.Check(dev, rec.Partition, repair, false)
	if err != nil {
		// Not a FAT file system any more, or a device that cannot be read or written.
		return false, "", status.Errorf(codes.FailedPrecondition, "volume %s: checking the file system on %s: %v", rec.ID, devPath, err)
	}
	return judgeCheck(rec, res, readOnly)
}

// repairs tells whether the check before serving may repair: not for a read-only staging, nor
// under onDamage=readonly.
func repairs(rec volume.Record, readOnly bool) bool {
	return !readOnly && rec.Params.OnDamagePolicy() != volume.OnDamageReadOnly
}

// judgeCheck applies the volume's onDamage policy to what the check found.
func judgeCheck(rec volume.Record, res *protocol.CheckResult, readOnly bool) (forceReadOnly bool, why string, err error) {
	policy := rec.Params.OnDamagePolicy()
	if len(res.Repaired) > 0 {
		klog.Warningf("volume %s was not cleanly unmounted or was damaged; repaired before serving (as fsck.fat -a would): %s",
			rec.ID, listProblems(res.Repaired, len(res.Repaired)))
	}
	if res.Clean {
		return false, "", nil
	}
	left := listProblems(res.Left, res.Total)
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

// listProblems quotes the first problems of total and counts the rest.
func listProblems(ps []string, total int) string {
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
