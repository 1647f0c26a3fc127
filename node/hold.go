package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// holdLimit bounds how long a volume in use is held for a copy: if the copy has not ended by
// then (or the plugin hangs or dies meanwhile), applications go on and the copy is void.
const holdLimit = 10 * time.Minute

// errOldMounter is a mounter that does not know the hold.
var errOldMounter = errors.New("mounter too old")

// holdForCopy writes a served volume back and holds every operation on it, in this process or
// in its mounter, so that its device can be copied as it is. release ends the hold and answers
// how long it lasted; it fails if the hold ended before (its limit passed, the mounter died),
// and then the copy is not the volume of one moment.
func (sv *servedVolume) holdForCopy(limit time.Duration) (release func() (time.Duration, error), err error) {
	if sv.remote == nil {
		return sv.local.Hold(limit)
	}
	p := sv.remote
	if p.isGone() {
		return nil, fmt.Errorf("hold volume %s: %s", sv.id, p.endedWhy())
	}
	c, err := dialMounter(p.socket, callTimeout)
	if err != nil {
		return nil, fmt.Errorf("hold volume %s: %w", sv.id, err)
	}
	// The mounter writes the volume back before it holds it, as a sync does.
	if _, err := protocol.Call(c, &protocol.Request{Op: protocol.OpHold, Volume: p.volume, Hold: &protocol.HoldArgs{Limit: limit}}, serveTimeout); err != nil {
		c.Close()
		var re *protocol.RemoteError
		if errors.As(err, &re) && re.Code == protocol.CodeInvalid {
			// A mounter started by an older driver, adopted across an upgrade, knows no hold.
			return nil, fmt.Errorf("%w: the mounter serving volume %s (%s) cannot hold it for a copy (%v); unstage and stage the volume again to serve it with this driver's mounter", errOldMounter, sv.id, p, err)
		}
		return nil, fmt.Errorf("hold volume %s in its mounter (%s): %w", sv.id, p, err)
	}
	return func() (time.Duration, error) {
		defer c.Close()
		resp, err := protocol.Call(c, &protocol.Request{Op: protocol.OpRelease, Volume: p.volume}, callTimeout)
		if err != nil {
			return 0, fmt.Errorf("release volume %s in its mounter (%s): the hold did not last until the copy ended: %w", sv.id, p, err)
		}
		if resp.Hold == nil {
			return 0, fmt.Errorf("release volume %s: the mounter answered without how long it held", sv.id)
		}
		return resp.Hold.Held, nil
	}, nil
}
