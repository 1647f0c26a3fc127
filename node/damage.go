package node

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/node/serving"
	"github.com/csi-fat/csi-fat/node/volume"
)

// checkBeforeServing checks the file system on devPath before it is served, in this process,
// and repairs what fsck.Repair repairs safely unless the volume is to be served read-only or the
// volume's onDamage policy is readonly. It answers whether the volume must be served read-only
// and, when so, why (the volume condition's message); with onDamage=fail, errors that are left
// make it a FailedPrecondition error instead. A mounter process runs the same check
// (mounter.Check, as m.cfg.InProcess.Check) on the descriptor it is handed, and serving.JudgeCheck judges both.
func (m *Manager) checkBeforeServing(open opener, rec volume.Record, devPath string, readOnly bool) (forceReadOnly bool, why string, err error) {
	repair := serving.Repairs(rec, readOnly)
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
	return serving.JudgeCheck(rec, res, readOnly)
}
