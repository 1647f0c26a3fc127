package mounters

import (
	"errors"
	"fmt"
	"time"

	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// ErrOld is a mounter that does not know the hold.
var ErrOld = errors.New("mounter too old")

// Hold writes the mounter's volume back and holds every operation on it, so that its device
// can be copied as it is. release ends the hold and answers how long it lasted; it fails if the
// hold ended before (its limit passed, the mounter died), and then the copy is not the volume
// of one moment.
func (p *Mounter) Hold(limit time.Duration) (release func() (time.Duration, error), err error) {
	if p.IsGone() {
		return nil, fmt.Errorf("hold volume %s: %s", p.volume, p.EndedWhy())
	}
	c, err := dial(p.socket, CallTimeout)
	if err != nil {
		return nil, fmt.Errorf("hold volume %s: %w", p.volume, err)
	}
	// The mounter writes the volume back before it holds it, as a sync does.
	if _, err := protocol.Call(c, &protocol.Request{Op: protocol.OpHold, Volume: p.volume, Hold: &protocol.HoldArgs{Limit: limit}}, ServeTimeout); err != nil {
		c.Close()
		var re *protocol.RemoteError
		if errors.As(err, &re) && re.Code == protocol.CodeInvalid {
			// A mounter started by an older driver, adopted across an upgrade, knows no hold.
			return nil, fmt.Errorf("%w: the mounter serving volume %s (%s) cannot hold it for a copy (%v); unstage and stage the volume again to serve it with this driver's mounter", ErrOld, p.volume, p, err)
		}
		return nil, fmt.Errorf("hold volume %s in its mounter (%s): %w", p.volume, p, err)
	}
	return func() (time.Duration, error) {
		defer c.Close()
		resp, err := protocol.Call(c, &protocol.Request{Op: protocol.OpRelease, Volume: p.volume}, CallTimeout)
		if err != nil {
			return 0, fmt.Errorf("release volume %s in its mounter (%s): the hold did not last until the copy ended: %w", p.volume, p, err)
		}
		if resp.Hold == nil {
			return 0, fmt.Errorf("release volume %s: the mounter answered without how long it held", p.volume)
		}
		return resp.Hold.Held, nil
	}, nil
}
