package node

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
)

// maxListedProblems bounds the problems quoted in a log line, an error or a volume condition.
const maxListedProblems = 5

// checkBeforeServing checks the file system on devPath before it is served, and repairs what
// fsck.Repair repairs safely unless the volume is to be served read-only or the volume's
// onDamage policy is readonly. It answers whether the volume must be served read-only and,
// when so, why (the volume condition's message); with onDamage=fail, errors that are left make
// it a FailedPrecondition error instead.
func checkBeforeServing(rec VolumeRecord, devPath string, readOnly bool) (forceReadOnly bool, why string, err error) {
	policy := rec.Params.onDamage()
	repair := !readOnly && policy != OnDamageReadOnly
	claim := blockdev.ExclusiveReadOnly
	if repair {
		claim = blockdev.Exclusive
	}
	dev, err := blockdev.OpenClaimed(devPath, claim)
	if err != nil {
		return false, "", status.Errorf(claimCode(err, codes.Internal), "volume %s: open %s to check it: %v", rec.ID, devPath, err)
	}
	defer dev.Close()
	var res *fsck.RepairResult
	if repair {
		res, err = fsck.Repair(dev)
	} else {
		var rep *fsck.Report
		rep, err = fsck.Check(dev)
		res = &fsck.RepairResult{Before: rep}
	}
	if err != nil {
		// Not a FAT file system any more, or a device that cannot be read or written.
		return false, "", status.Errorf(codes.FailedPrecondition, "volume %s: checking the file system on %s: %v", rec.ID, devPath, err)
	}
	if res.Changed() {
		klog.Warningf("volume %s was not cleanly unmounted or was damaged; repaired before serving (as fsck.fat -a would): %s",
			rec.ID, listProblems(res.Repaired))
	}
	if res.Clean() {
		return false, "", nil
	}
	var left []fsck.Problem
	switch {
	case res.After != nil:
		left = res.After.Errors() // repaired, yet errors remain
	case len(res.Unrepairable) > 0:
		left = res.Unrepairable
	default:
		left = res.Before.Errors() // not repaired: read-only staging or onDamage=readonly
	}
	beyondRepair := res.After != nil || len(res.Before.Unrepairable()) > 0
	if policy == OnDamageFail && beyondRepair {
		written := "nothing was written"
		if res.Changed() {
			written = "what was safe to repair was repaired"
		}
		return false, "", status.Errorf(codes.FailedPrecondition,
			"volume %s: the file system has errors that are not safe to repair automatically (%s=%s), %s: %s; repair it with fsck.fat",
			rec.ID, ParamOnDamage, policy, written, listProblems(left))
	}
	why = fmt.Sprintf("served read-only: the file system has errors that were not repaired (%s=%s): %s", ParamOnDamage, policy, listProblems(left))
	if readOnly {
		why = fmt.Sprintf("staged read-only with file system errors that were not repaired: %s", listProblems(left))
	}
	klog.Warningf("volume %s: %s", rec.ID, why)
	return true, why, nil
}

// listProblems quotes the first problems and counts the rest.
func listProblems(ps []fsck.Problem) string {
	var b strings.Builder
	for i, p := range ps {
		if i == maxListedProblems {
			fmt.Fprintf(&b, "; and %d more", len(ps)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}
