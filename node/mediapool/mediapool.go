package mediapool

import (
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/prober"
	"github.com/csi-fat/csi-fat/node/volume"
)

// Pool is a node's removable-media pool: the members its scan finds (cfg), what they hold (as
// the prober reads it), which of them volumes claim (from the node's records) and how a new
// volume takes one.
type Pool struct {
	cfg    *media.Config
	prober *prober.Prober
	// check checks the file system on a device (or its partition) before a volume adopts it, in
	// a mounter or with the in-process engine, and returns its label.
	check func(d media.Device, partition string) (string, error)
	// volumes lists the node's volumes, copied, for their claims.
	volumes func() []volume.Record
}

// New is the pool of the media cfg selects, looked at with prober; check and volumes are as
// in Pool.
func New(cfg *media.Config, prober *prober.Prober, check func(d media.Device, partition string) (string, error), volumes func() []volume.Record) *Pool {
	return &Pool{cfg: cfg, prober: prober, check: check, volumes: volumes}
}
