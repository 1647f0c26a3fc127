package blockdev

import "fmt"

// UpdateSize reads the size again from the open descriptor, for an image file (or a device)
// grown while open, and returns it. A size smaller than before is refused and the old one kept:
// the volume on it may use every byte it had.
func (d *File) UpdateSize() (int64, error) {
	old := d.size.Load()
	n := &File{f: d.f, path: d.path, isBlock: d.isBlock}
	if err := n.probe(); err != nil {
		return old, err
	}
	size := n.size.Load()
	if size < old {
		return old, fmt.Errorf("blockdev %s: size dropped from %d to %d bytes while open: %w", d.path, old, size, ErrOutOfRange)
	}
	d.size.Store(size)
	return size, nil
}
