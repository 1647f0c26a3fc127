package fatvol

import (
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Paths follow io/fs: slash-separated, relative to the root, "." for the root itself.

// resolve walks to the node at name.
func (v *Volume) resolve(name string) (*node, error) {
	if !fs.ValidPath(name) {
		return nil, syscall.EINVAL
	}
	n := v.root
	if name == "." {
		return n, nil
	}
	for _, part := range strings.Split(name, "/") {
		d, err := n.loadDir()
		if err != nil {
			return nil, err
		}
		off, ok := d.lookup(part)
		if !ok {
			return nil, syscall.ENOENT
		}
		n = d.child(off)
	}
	return n, nil
}

// resolveParent walks to the directory that holds name, returning it and name's last element.
func (v *Volume) resolveParent(name string) (*dirContent, string, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, "", syscall.EINVAL
	}
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	p, err := v.resolve(dir)
	if err != nil {
		return nil, "", err
	}
	d, err := p.loadDir()
	if err != nil {
		return nil, "", err
	}
	return d, base, nil
}

// newEntry returns a short entry stamped with the current time as created, modified and accessed.
func (v *Volume) newEntry(attr uint8) ondisk.DirEntry {
	var e ondisk.DirEntry
	e.Attr = attr
	e.CreateDate, e.CreateTime, e.CreateTenth = ondisk.EncodeTime(time.Now(), v.loc)
	e.ModDate, e.ModTime, e.AccessDate = e.CreateDate, e.CreateTime, e.CreateDate
	return e
}

// OpenFile opens a file with os.O_* flags, creating it with O_CREATE. perm matters only for a new
// file: without any write bit it gets the read-only attribute, as on Linux vfat.
func (v *Volume) OpenFile(name string, flag int, perm fs.FileMode) (*File, error) {
	v.mu.Lock()
	defer v.endOp()
	f, err := v.openFile(name, flag, perm)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return f, nil
}

const writeFlags = os.O_WRONLY | os.O_RDWR | os.O_CREATE | os.O_TRUNC | os.O_APPEND

func (v *Volume) openFile(name string, flag int, perm fs.FileMode) (*File, error) {
	if err := v.usable(); err != nil {
		return nil, err
	}
	if flag&writeFlags != 0 {
		if err := v.writable(); err != nil {
			return nil, err
		}
	}
	var n *node
	if name == "." {
		n = v.root
	} else {
		d, base, err := v.resolveParent(name)
		if err != nil {
			return nil, err
		}
		if off, ok := d.lookup(base); ok {
			if flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0 {
				return nil, syscall.EEXIST
			}
			n = d.child(off)
		} else {
			if flag&os.O_CREATE == 0 {
				return nil, syscall.ENOENT
			}
			attr := uint8(ondisk.AttrArchive)
			if perm&0o222 == 0 {
				attr |= ondisk.AttrReadOnly
			}
			off, err := d.insert(base, v.newEntry(attr), -1)
			if err != nil {
				return nil, v.finish(err)
			}
			d.n.touch(false)
			n = d.child(off)
		}
	}
	if n.isDir() && flag&(os.O_WRONLY|os.O_RDWR|os.O_TRUNC) != 0 {
		return nil, syscall.EISDIR
	}
	if flag&os.O_TRUNC != 0 && flag&(os.O_WRONLY|os.O_RDWR) != 0 && n.ent.Size != 0 {
		if err := n.truncate(0); err != nil {
			return nil, v.finish(err)
		}
	}
	// Held before finish, which may let go of the lock: an unlink meanwhile must see the handle.
	n.refs++
	if flag&writeFlags != 0 {
		if err := v.finish(nil); err != nil {
			n.refs--
			return nil, err
		}
	}
	return &File{v: v, n: n, name: name, flag: flag}, nil
}

// Create creates or truncates a file for reading and writing, like os.Create.
func (v *Volume) Create(name string) (*File, error) {
	return v.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// Mkdir makes a directory with its '.' and '..' entries in one zeroed cluster.
func (v *Volume) Mkdir(name string) error {
	v.mu.Lock()
	defer v.endOp()
	if err := v.writable(); err != nil {
		return pathErr("mkdir", name, err)
	}
	return pathErr2("mkdir", name, v.finish(v.mkdir(name)))
}

func (v *Volume) mkdir(name string) error {
	d, base, err := v.resolveParent(name)
	if err != nil {
		return err
	}
	if _, ok := d.lookup(base); ok {
		return syscall.EEXIST
	}
	got, err := v.allocate(1, 0)
	if err != nil {
		return err
	}
	e := v.newEntry(ondisk.AttrDirectory)
	e.SetCluster(got[0].start)
	off, err := d.insert(base, e, -1)
	if err != nil {
		// Nothing ever pointed at the cluster: it is free at once.
		v.fat.freeChain(got)
		return err
	}
	d.n.touch(false)
	c := d.child(off)
	c.setChain(got)
	c.chainOK = true
	cd := &dirContent{n: c, buf: make([]byte, v.geo.ClusterSize), dirty: make([]bool, v.geo.ClusterSize/v.geo.SectorSize), fresh: make([]bool, v.geo.ClusterSize/v.geo.SectorSize)}
	dot, dotdot := e, e
	dot.Name, dotdot.Name = ondisk.Dot, ondisk.DotDot
	dot.Attr, dotdot.Attr = ondisk.AttrDirectory, ondisk.AttrDirectory
	dotdot.SetCluster(0)
	if !d.n.isRoot() {
		dotdot.SetCluster(d.n.firstCluster())
	}
	dot.Encode(cd.buf[0:])
	dotdot.Encode(cd.buf[ondisk.DirEntrySize:])
	cd.index()
	c.dir = cd
	v.dirs.used(cd)
	cd.markDirty(0, len(cd.buf))
	cd.markFresh(0, len(cd.buf))
	return nil
}

// Remove removes a file or an empty directory. A file that is still open keeps its clusters until
// its last handle closes.
func (v *Volume) Remove(name string) error {
	v.mu.Lock()
	defer v.endOp()
	if err := v.writable(); err != nil {
		return pathErr("remove", name, err)
	}
	return pathErr2("remove", name, v.finish(v.remove(name)))
}

func (v *Volume) remove(name string) error {
	d, base, err := v.resolveParent(name)
	if err != nil {
		return err
	}
	off, ok := d.lookup(base)
	if !ok {
		return syscall.ENOENT
	}
	c := d.child(off)
	if c.isDir() {
		cd, err := c.loadDir()
		if err != nil {
			return err
		}
		if !cd.isEmpty() {
			return syscall.ENOTEMPTY
		}
	}
	if _, err := c.extents(); err != nil {
		return err
	}
	d.remove(off)
	d.n.touch(false)
	return c.unlink()
}

// unlink marks a node whose entry is gone: its clusters are freed now, or at its last close.
func (n *node) unlink() error {
	n.unlinked = true
	if n.refs == 0 {
		return n.freeClusters()
	}
	n.vol.orphans[n] = struct{}{}
	return nil
}

// RenameFlags modify Rename as renameat2(2)'s flags do.
type RenameFlags int

const (
	// RenameNoReplace fails with EEXIST instead of replacing an existing newname.
	RenameNoReplace RenameFlags = 1 << iota
	// RenameExchange swaps oldname and newname, which must both exist.
	RenameExchange
)

// Rename moves oldname to newname, replacing newname if it exists (a directory only by an empty
// directory), as rename(2). The target's entry is rewritten in place, so newname never stops
// existing. A directory cannot move into its own subtree.
func (v *Volume) Rename(oldname, newname string) error {
	return v.RenameWithFlags(oldname, newname, 0)
}

// RenameWithFlags is Rename with renameat2(2)'s flags.
func (v *Volume) RenameWithFlags(oldname, newname string, flags RenameFlags) error {
	v.mu.Lock()
	defer v.endOp()
	err := v.writable()
	if err == nil {
		switch flags {
		case 0, RenameNoReplace:
			err = v.finish(v.rename(oldname, newname, flags))
		case RenameExchange:
			err = v.finish(v.exchange(oldname, newname))
		default:
			err = syscall.EINVAL
		}
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return nil
}

func (v *Volume) rename(oldname, newname string, flags RenameFlags) error {
	// Both parents first, then the entries, as rename(2) reports errors.
	od, ob, err := v.resolveParent(oldname)
	if err != nil {
		return err
	}
	nd, nb, err := v.resolveParent(newname)
	if err != nil {
		return err
	}
	ooff, ok := od.lookup(ob)
	if !ok {
		return syscall.ENOENT
	}
	if od.buf[ooff+12]&ondisk.RenameNew != 0 || od.dirty[od.sectorOf(ooff)] {
		// The source's entry must be on the disk as it is in memory before a new entry like it
		// goes out: else a cut could leave the two names with different sizes (not recognisably
		// one file), or, for the new name of a rename whose mark is not cleared yet, two marked.
		if err := v.durable(); err != nil {
			return err
		}
	}
	src := od.child(ooff)
	clean, err := ondisk.CleanName(nb)
	if err != nil {
		return nameErr(err)
	}
	if src.isDir() {
		for a := nd.n; a != nil; a = a.parent {
			if a == src {
				return syscall.EINVAL
			}
		}
	}
	toff, exists := nd.lookup(clean)
	replacing := -1
	if exists && nd == od && toff == ooff {
		// The same entry: a no-op, or a change of case that needs a new name.
		if od.slots[ooff].name == clean {
			return nil
		}
		exists, replacing = false, ooff
	}
	if exists && flags&RenameNoReplace != 0 {
		return syscall.EEXIST
	}
	if exists {
		tgt := nd.child(toff)
		// A target that is an ancestor of the source is never empty (rename(2) checks this
		// before the types).
		for a := od.n; a != nil; a = a.parent {
			if a == tgt {
				return syscall.ENOTEMPTY
			}
		}
		if tgt.isDir() {
			if !src.isDir() {
				return syscall.EISDIR
			}
			td, err := tgt.loadDir()
			if err != nil {
				return err
			}
			if !td.isEmpty() {
				return syscall.ENOTEMPTY
			}
		} else if src.isDir() {
			return syscall.ENOTDIR
		}
		if _, err := tgt.extents(); err != nil {
			return err
		}
		e := src.ent
		old := nd.entry(toff)
		e.Name, e.NTCase = old.Name, old.NTCase&^ondisk.RenameNew
		removed := od.span(ooff)
		split := !v.sameSector(od, removed, nd, entrySpan{toff, toff + ondisk.DirEntrySize})
		if split {
			e.NTCase |= ondisk.RenameNew
			v.keepMark(nd, toff)
		}
		src.storeEntry() // the old entry as the disk is to keep it: the same as the new one
		oldBytes := append([]byte(nil), od.buf[removed.start:removed.end]...)
		od.remove(ooff)
		nd.putEntry(toff, &e)
		delete(nd.children, toff)
		// The target's clusters are let go of now, and freed once its rewritten entry is
		// durable: until then the disk still points at them.
		if err := tgt.unlink(); err != nil {
			return err
		}
		src.moveTo(nd, toff)
		if split {
			if err := v.newEntryFirst(src, od, removed, oldBytes); err != nil {
				return err
			}
		}
	} else {
		off, err := nd.insert(clean, src.ent, replacing)
		if err != nil {
			return err
		}
		// insert may have grown nd; od's offsets are unaffected even when nd == od.
		removed, added := od.span(ooff), nd.span(off)
		split := !v.sameSector(od, removed, nd, added)
		if split {
			nd.buf[off+12] |= ondisk.RenameNew
			v.keepMark(nd, off)
		}
		src.storeEntry() // the old entry as the disk is to keep it: the same as the new one
		oldBytes := append([]byte(nil), od.buf[removed.start:removed.end]...)
		od.remove(ooff)
		src.moveTo(nd, off)
		if split {
			if err := v.newEntryFirst(src, od, removed, oldBytes); err != nil {
				return err
			}
		}
	}
	if od != nd {
		if err := src.fixDotDot(); err != nil {
			return err
		}
	}
	od.n.touch(false)
	if nd != od {
		nd.n.touch(false)
	}
	return nil
}

// A rename writes two entries: the source's removal and the target's entry. When one sector
// holds both, one write does both. Otherwise the new entry goes first, as Linux vfat writes it:
// it is made durable while the disk keeps the old one, marked (ondisk.RenameNew) as the new name
// of a rename; then the old entry's removal is made durable, and the mark is cleared at the next
// writeback of directories. A cut in between leaves the file under both names, one marked, which the next
// open for writing and fsck resolve by keeping the marked one: never under neither name.

// entrySpan is the range of a directory's content an entry takes, long-name entries included.
type entrySpan struct{ start, end int }

// span is the range of the entry at off, whose short entry is at off.
func (d *dirContent) span(off int) entrySpan {
	return entrySpan{d.slots[off].lfnOff, off + ondisk.DirEntrySize}
}

// sameSector tells whether a's span of da and b's span of db lie in one device sector.
func (v *Volume) sameSector(da *dirContent, a entrySpan, db *dirContent, b entrySpan) bool {
	ss := int64(v.geo.SectorSize)
	sector := da.devOffset(a.start) / ss
	for _, x := range []int64{da.devOffset(a.end - 1), db.devOffset(b.start), db.devOffset(b.end - 1)} {
		if x/ss != sector {
			return false
		}
	}
	return true
}

// newEntryFirst makes a rename's new entry durable while the disk keeps the old one: span of od
// shows oldBytes, the old entry (with the same fields as the new one), meanwhile. A directory
// moved to another parent then gets its '..' pointed at the new parent, durably too, before the
// old entry goes: '..' lives in a third sector, and agrees with the old entry until the new one
// is durable and with the new one from then on (the resolution of a cut in between keeps the new
// one and points '..' at its parent). Then the old entry's removal is made durable at once: the
// two entries must stay alike while both may be on the disk, and a later writeback could change
// the new one (a size) in the same phase as the removal. The mark is cleared at the next
// writeback of directories.
func (v *Volume) newEntryFirst(src *node, od *dirContent, span entrySpan, oldBytes []byte) error {
	copy(od.buf[span.start:span.end], oldBytes)
	err := v.durable()
	if err == nil && src.isDir() && od != src.parent.dir {
		if err = src.pointDotDotAt(src.parent); err == nil {
			err = v.durable()
		}
	}
	for o := span.start; o < span.end; o += ondisk.DirEntrySize {
		ondisk.MarkDeleted(od.buf[o:])
	}
	od.markDirty(span.start, span.end-span.start)
	if err != nil {
		return err
	}
	v.unmarkAfterRemoval(src.parent.dir, src.off)
	return v.durable()
}

// fixDotDot points a moved directory's '..' at its new parent (cluster 0 for the root, FAT32 too).
func (n *node) fixDotDot() error { return n.pointDotDotAt(n.parent) }

func (n *node) pointDotDotAt(parent *node) error {
	if !n.isDir() {
		return nil
	}
	d, err := n.loadDir()
	if err != nil {
		return err
	}
	if d.dotOff >= 0 {
		e := d.entry(d.dotOff)
		want := uint32(0)
		if !parent.isRoot() {
			want = parent.firstCluster()
		}
		if e.Cluster(n.vol.geo.Type) == want {
			return nil
		}
		e.SetCluster(want)
		d.putEntry(d.dotOff, &e)
	}
	return nil
}

// exchange swaps two entries' contents, each keeping its name, as RENAME_EXCHANGE.
func (v *Volume) exchange(aname, bname string) error {
	ad, ab, err := v.resolveParent(aname)
	if err != nil {
		return err
	}
	bd, bb, err := v.resolveParent(bname)
	if err != nil {
		return err
	}
	aoff, ok := ad.lookup(ab)
	if !ok {
		return syscall.ENOENT
	}
	boff, ok := bd.lookup(bb)
	if !ok {
		return syscall.ENOENT
	}
	if ad == bd && aoff == boff {
		return nil
	}
	if (ad.buf[aoff+12]|bd.buf[boff+12])&ondisk.RenameNew != 0 {
		// The new name of a rename whose mark is not cleared yet: that rename is settled first,
		// else its old entry and the entry the exchange writes would share clusters, unmarked.
		if err := v.durable(); err != nil {
			return err
		}
	}
	a, b := ad.child(aoff), bd.child(boff)
	// Neither may end up inside itself.
	for p := bd.n; p != nil; p = p.parent {
		if p == a {
			return syscall.EINVAL
		}
	}
	for p := ad.n; p != nil; p = p.parent {
		if p == b {
			return syscall.EINVAL
		}
	}
	aspan, bspan := ad.span(aoff), bd.span(boff)
	oldB := append([]byte(nil), bd.buf[bspan.start:bspan.end]...)
	ae, be := a.ent, b.ent
	ae.Name, ae.NTCase, be.Name, be.NTCase = be.Name, be.NTCase&^ondisk.RenameNew, ae.Name, ae.NTCase&^ondisk.RenameNew
	a.ent, b.ent = ae, be
	delete(ad.children, aoff)
	delete(bd.children, boff)
	a.moveTo(bd, boff)
	b.moveTo(ad, aoff)
	if !v.sameSector(ad, aspan, bd, bspan) {
		if err := v.exchangeInSteps(ad, aspan, bd, bspan, oldB); err != nil {
			return err
		}
	}
	if ad != bd {
		if err := a.fixDotDot(); err != nil {
			return err
		}
		if err := b.fixDotDot(); err != nil {
			return err
		}
	}
	ad.n.touch(false)
	if ad != bd {
		bd.n.touch(false)
	}
	return nil
}

// exchangeInSteps writes an exchange whose two entries lie in two sectors so that no cut leaves
// them sharing clusters: a's entry is first removed (durably, while b's stays as it was), then b's
// new entry is made durable, then a's new entry is left to writeback. A cut in between loses a's
// name for a while, its clusters lost, never both names on one chain. oldB is b's span as it was.
func (v *Volume) exchangeInSteps(ad *dirContent, aspan entrySpan, bd *dirContent, bspan entrySpan, oldB []byte) error {
	newA := append([]byte(nil), ad.buf[aspan.start:aspan.end]...)
	newB := append([]byte(nil), bd.buf[bspan.start:bspan.end]...)
	defer func() {
		copy(ad.buf[aspan.start:aspan.end], newA)
		copy(bd.buf[bspan.start:bspan.end], newB)
		ad.markDirty(aspan.start, aspan.end-aspan.start)
		bd.markDirty(bspan.start, bspan.end-bspan.start)
	}()
	for o := aspan.start; o < aspan.end; o += ondisk.DirEntrySize {
		ondisk.MarkDeleted(ad.buf[o:])
	}
	copy(bd.buf[bspan.start:bspan.end], oldB)
	if err := v.durable(); err != nil {
		return err
	}
	copy(bd.buf[bspan.start:bspan.end], newB)
	bd.markDirty(bspan.start, bspan.end-bspan.start)
	return v.durable()
}

// moveTo re-homes a node after its entry moved to offset off of d.
func (n *node) moveTo(d *dirContent, off int) {
	s := d.slots[off]
	e := d.entry(off)
	n.parent, n.off, n.lfnOff, n.name = d.n, off, s.lfnOff, s.name
	n.ent.Name, n.ent.NTCase = e.Name, e.NTCase
	d.children[off] = n
	n.storeEntry()
}

// Chtimes sets the access and modification times (FAT keeps a date for access and 2-second
// resolution for modification). A zero time leaves that time alone.
func (v *Volume) Chtimes(name string, atime, mtime time.Time) error {
	return v.changeEntry("chtimes", name, func(n *node) error { return n.chtimes(atime, mtime) })
}

func (n *node) chtimes(atime, mtime time.Time) error {
	if !mtime.IsZero() {
		n.ent.ModDate, n.ent.ModTime, _ = ondisk.EncodeTime(mtime, n.vol.loc)
	}
	if !atime.IsZero() {
		n.ent.AccessDate, _, _ = ondisk.EncodeTime(atime, n.vol.loc)
	}
	return nil
}

// Attribute bits that SetAttributes may change.
const settableAttrs = ondisk.AttrReadOnly | ondisk.AttrHidden | ondisk.AttrSystem | ondisk.AttrArchive

// SetAttributes sets the read-only, hidden, system and archive bits of an entry.
func (v *Volume) SetAttributes(name string, attr uint8) error {
	return v.changeEntry("chattr", name, func(n *node) error { return n.setAttributes(attr) })
}

func (n *node) setAttributes(attr uint8) error {
	if attr&^settableAttrs != 0 {
		return syscall.EINVAL
	}
	n.ent.Attr = n.ent.Attr&^settableAttrs | attr
	return nil
}

// Truncate sets the size of the named file.
func (v *Volume) Truncate(name string, size int64) error {
	return v.changeEntry("truncate", name, func(n *node) error {
		if n.isDir() {
			return syscall.EISDIR
		}
		return n.truncate(size)
	})
}

func (v *Volume) changeEntry(op, name string, change func(*node) error) error {
	v.mu.Lock()
	defer v.endOp()
	if err := v.writable(); err != nil {
		return pathErr(op, name, err)
	}
	n, err := v.resolve(name)
	if err != nil {
		return pathErr(op, name, err)
	}
	if n.isRoot() {
		return pathErr(op, name, syscall.EPERM)
	}
	err = change(n)
	if err == nil {
		n.storeEntry()
	}
	return pathErr2(op, name, v.finish(err))
}

// pathErr2 is pathErr that keeps nil as nil.
func pathErr2(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return pathErr(op, name, err)
}

// SubdirCount is the number of subdirectories of the directory name, for link counts.
func (v *Volume) SubdirCount(name string) (int, error) {
	v.mu.Lock()
	defer v.endOp()
	if err := v.usable(); err != nil {
		return 0, pathErr("stat", name, err)
	}
	n, err := v.resolve(name)
	if err != nil {
		return 0, pathErr("stat", name, err)
	}
	d, err := n.loadDir()
	if err != nil {
		return 0, pathErr("stat", name, err)
	}
	count := 0
	for off := range d.slots {
		if d.buf[off+11]&ondisk.AttrDirectory != 0 {
			count++
		}
	}
	return count, nil
}
