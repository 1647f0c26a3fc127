package fatvol

import (
	"errors"
	"fmt"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Damage policy. Media come from the field, and a volume can be damaged in ways only a full check
// finds. The engine does not run one at open; it refuses to make damage worse:
//
//   - At open it reads the whole FAT anyway, and checks it in the same pass: entries outside the
//     data area, clusters two chains share, chains into free clusters, chains that loop.
//   - While in use, whatever it reads that no consistent volume holds (a chain that ends early,
//     starts inside another chain or at another entry's cluster, a directory that loops or shares
//     clusters with another) fails that operation with ErrCorrupt (EIO).
//
// Either way the volume is then damaged: from that moment every change fails with EROFS, as
// Linux's errors=remount-ro does, and Damage says why. What was written before still reaches the
// disk. Reads go on: they return what the volume holds, or ErrCorrupt where it cannot be told
// which entry a cluster belongs to. Damage the engine has not read yet (an entry pointing at a
// free cluster, in a directory nothing has listed) cannot stop a write; fsck finds it.

// Damage returns the first damage found on the volume, nil when none: non-nil means the volume
// refuses changes and needs repair.
func (v *Volume) Damage() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.damage
}

// noteDamage records err when it reports corruption, and returns it.
func (v *Volume) noteDamage(err error) error {
	if err != nil && errors.Is(err, ErrCorrupt) && v.damage == nil {
		v.damage = err
		v.opts.Logger.Warn("fatvol: volume is damaged; changes are refused until it is repaired", "device", v.name, "damage", err.Error())
	}
	return err
}

// claimant is the entry whose chain holds a cluster: the directory it is in and its offset
// there (nil and -1 for the root). It names the entry, not its node, so that claims do not keep
// the nodes of closed files in memory; a directory's claims go when it leaves memory.
type claimant struct {
	parent *node
	off    int
}

func claimantOf(n *node) claimant { return claimant{parent: n.parent, off: n.off} }

// claim records that n's chain holds cluster c: its first cluster for a file, every cluster for
// a directory. A cluster claimed by another entry still in place is a cross-link: an error, so
// the walk visits every directory at most once, and no file shows another's data.
//
// A cluster allocated since open that no entry of this session ever claimed (a new directory's)
// was free when the entry was written: the entry was dangling, and the cluster now holds another
// directory. (A claim whose entry moved, by a rename, is not checked further: the entry read may
// be the moved one.)
func (v *Volume) claim(n *node, c uint32) error {
	me := claimantOf(n)
	owner, ok := v.claims[c]
	switch {
	case ok && owner != me && v.claimHolds(owner, c) && v.renamePair(owner, n):
		// Both names of a rename a cut interrupted (read-only: an open for writing resolves
		// them first): one file, not a cross-link.
		return nil
	case ok && owner != me && v.claimHolds(owner, c):
		return fmt.Errorf("%w: %s and %s both hold cluster %d (cross-linked)", ErrCorrupt, n.path(), v.claimPath(owner), c)
	case v.fat.isFresh(c) && !ok:
		return fmt.Errorf("%w: %s points at cluster %d, which was free (a dangling entry)", ErrCorrupt, n.path(), c)
	}
	if !ok || owner != me {
		v.setClaim(n, c)
	}
	return nil
}

// setClaim records that n's entry holds c, and lists c with the directory the entry is in, so
// that the claim goes when the directory leaves memory (dircache.go). An entry whose directory
// is no longer in memory (a removed file still open) claims nothing: no claim of it could be
// checked.
func (v *Volume) setClaim(n *node, c uint32) {
	if n.parent != nil {
		d := n.parent.dir
		if d == nil {
			return
		}
		d.claimed = append(d.claimed, c)
	}
	v.claims[c] = claimantOf(n)
}

// claimHolds tells whether the claimant's entry is still in place and still holds c: starts at
// it, or for a loaded directory, has it in its chain. Claims are not removed when entries go or
// move; they are checked.
func (v *Volume) claimHolds(cl claimant, c uint32) bool {
	if cl.parent == nil {
		return extentsHold(v.root.ext, c)
	}
	d := cl.parent.dir
	if cl.parent.unlinked || d == nil {
		return false
	}
	if _, ok := d.slots[cl.off]; !ok {
		return false
	}
	if child, ok := d.children[cl.off]; ok && child.dir != nil {
		return extentsHold(child.ext, c)
	}
	e := d.entry(cl.off)
	return e.Cluster(v.geo.Type) == c
}

// renamePair tells whether the claimant's entry and n's are the two names of one file that a cut
// left in the middle of a rename: the same first cluster, size and attributes, exactly one
// marked as the new name; or the same entry reached through both names of a directory.
func (v *Volume) renamePair(cl claimant, n *node) bool {
	if cl.parent == nil || n.parent == nil {
		return false
	}
	if cl.off == n.off && cl.parent != n.parent && cl.parent.firstCluster() == n.parent.firstCluster() {
		return v.renamePair(claimantOf(cl.parent), n.parent)
	}
	a, b := cl.parent.dir.entry(cl.off), n.ent
	return a.Cluster(v.geo.Type) == b.Cluster(v.geo.Type) && a.Size == b.Size && a.Attr == b.Attr &&
		(a.NTCase^b.NTCase)&ondisk.RenameNew != 0
}

func (v *Volume) claimPath(cl claimant) string {
	if cl.parent == nil {
		return "/"
	}
	p := cl.parent.path()
	if p != "/" {
		p += "/"
	}
	return p + cl.parent.dir.slots[cl.off].name
}

func extentsHold(ext []extent, c uint32) bool {
	for _, e := range ext {
		if c >= e.start && c < e.start+e.count {
			return true
		}
	}
	return false
}
