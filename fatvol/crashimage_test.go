package fatvol_test

import (
	"bytes"
	"fmt"
	"os"
	"slices"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Rebuilding what a medium holds after a power cut. The model of the medium: a write may sit in
// a volatile cache until the next flush, so after a cut at request k the medium holds every
// write up to the last flush before k, any subset of the writes issued after that flush, and a
// prefix of whole sectors of request k itself, which was under way. A single sector is written
// whole or not at all.

const crashSector = 512

// crashPoint is one power cut: at request k of the log (k == len(log): after the last request),
// with the writes since the last flush that reached the medium chosen by keep (by position in
// that window) and the first torn sectors of request k written.
type crashPoint struct {
	k     int
	keep  []bool
	torn  int
	index int // order in which the point was drawn, for messages
}

func (p crashPoint) String() string {
	s := fmt.Sprintf("cut at request %d, window writes kept %s", p.k, keepString(p.keep))
	if p.torn > 0 {
		s += fmt.Sprintf(", %d sector(s) of request %d", p.torn, p.k)
	}
	return s
}

func keepString(keep []bool) string {
	b := make([]byte, len(keep))
	for i, k := range keep {
		b[i] = '0'
		if k {
			b[i] = '1'
		}
	}
	return "[" + string(b) + "]"
}

// crashLog is a recorded workload over a base image. It rebuilds the medium at points given in
// increasing order of k: the durable image is advanced in place, flush by flush.
type crashLog struct {
	ops     []blockdev.RecordedOp
	durable []byte // base plus every write before the flush at applied-1
	applied int
}

func newCrashLog(base []byte, ops []blockdev.RecordedOp) *crashLog {
	return &crashLog{ops: ops, durable: slices.Clone(base)}
}

// lastFlush is the index of the last flush before request k, -1 when none.
func (l *crashLog) lastFlush(k int) int {
	for i := min(k, len(l.ops)) - 1; i >= 0; i-- {
		if l.ops[i].Flush {
			return i
		}
	}
	return -1
}

// window lists the writes after the last flush before k and before k.
func (l *crashLog) window(k int) []int {
	var w []int
	for i := l.lastFlush(k) + 1; i < k; i++ {
		if !l.ops[i].Flush {
			w = append(w, i)
		}
	}
	return w
}

// tornMax is how many whole sectors of request k a cut can leave written without the whole
// request: 0 for a flush, the end of the log or a one-sector write.
func (l *crashLog) tornMax(k int) int {
	if k >= len(l.ops) || l.ops[k].Flush {
		return 0
	}
	return (len(l.ops[k].Data) - 1) / crashSector
}

// at rebuilds the medium for p. Points must come in non-decreasing order of k.
func (l *crashLog) at(p crashPoint) *crashDevice {
	f := l.lastFlush(p.k)
	if f+1 < l.applied {
		panic("crash points out of order")
	}
	for ; l.applied <= f; l.applied++ {
		if op := l.ops[l.applied]; !op.Flush {
			copy(l.durable[op.Off:], op.Data)
		}
	}
	d := &crashDevice{base: l.durable, sectors: map[int64][]byte{}}
	for i, idx := range l.window(p.k) {
		if p.keep[i] {
			d.write(l.ops[idx].Data, l.ops[idx].Off)
		}
	}
	if p.torn > 0 {
		op := l.ops[p.k]
		d.write(op.Data[:p.torn*crashSector], op.Off)
	}
	return d
}

// crashDevice is a medium after a cut: the durable image with the sectors that reached the
// medium since the last flush laid over it. It is read-only.
type crashDevice struct {
	base     []byte
	sectors  map[int64][]byte
	writable bool // a copy to repair: writes go to sectors, never to base
}

var _ blockdev.Device = (*crashDevice)(nil)

func (d *crashDevice) write(p []byte, off int64) {
	for len(p) > 0 {
		s := off / crashSector
		in := off - s*crashSector
		n := min(int64(len(p)), crashSector-in)
		sec, ok := d.sectors[s]
		if !ok {
			sec = slices.Clone(d.base[s*crashSector : (s+1)*crashSector])
			d.sectors[s] = sec
		}
		copy(sec[in:], p[:n])
		p, off = p[n:], off+n
	}
}

func (d *crashDevice) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(d.base)) {
		return 0, fmt.Errorf("crash image: read of %d bytes at %d: %w", len(p), off, blockdev.ErrOutOfRange)
	}
	done := 0
	for done < len(p) {
		at := off + int64(done)
		s := at / crashSector
		in := at - s*crashSector
		n := min(int64(len(p)-done), crashSector-in)
		if sec, ok := d.sectors[s]; ok {
			copy(p[done:], sec[in:in+n])
		} else {
			copy(p[done:], d.base[at:at+n])
		}
		done += int(n)
	}
	return done, nil
}

func (d *crashDevice) WriteAt(p []byte, off int64) (int, error) {
	if !d.writable || off < 0 || off+int64(len(p)) > int64(len(d.base)) {
		return 0, fmt.Errorf("crash image: write at %d: %w", off, blockdev.ErrReadOnly)
	}
	d.write(p, off)
	return len(p), nil
}

func (d *crashDevice) WritevAt(bufs [][]byte, off int64) (int, error) {
	n := 0
	for _, b := range bufs {
		m, err := d.WriteAt(b, off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// copyToRepair returns a writable copy of the medium.
func (d *crashDevice) copyToRepair() *crashDevice {
	c := &crashDevice{base: d.base, sectors: make(map[int64][]byte, len(d.sectors)), writable: true}
	for s, b := range d.sectors {
		c.sectors[s] = slices.Clone(b)
	}
	return c
}

func (d *crashDevice) StartWriteback(off, length int64) error { return nil }
func (d *crashDevice) Flush() error                           { return nil }
func (d *crashDevice) Size() int64                            { return int64(len(d.base)) }
func (d *crashDevice) LogicalBlockSize() int                  { return crashSector }
func (d *crashDevice) BlockSize() int                         { return 4096 }
func (d *crashDevice) Close() error                           { return nil }

// bytes returns the whole image.
func (d *crashDevice) bytes() []byte {
	img := slices.Clone(d.base)
	for s, sec := range d.sectors {
		copy(img[s*crashSector:], sec)
	}
	return img
}

// writeFile writes the image to path, for fsck.fat: a sparse file, only chunks that are not all
// zeros written (most of an image is).
func (d *crashDevice) writeFile(path string) error {
	img := d.bytes()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(int64(len(img))); err != nil {
		return err
	}
	const chunk = 64 << 10
	zero := make([]byte, chunk)
	for off := 0; off < len(img); off += chunk {
		c := img[off:min(off+chunk, len(img))]
		if bytes.Equal(c, zero[:len(c)]) {
			continue
		}
		if _, err := f.WriteAt(c, int64(off)); err != nil {
			return err
		}
	}
	return f.Close()
}

// withFATCopy returns the image as a checker would see it if FAT copy n were the first: every
// read of copy 0 is served from copy n. The engine and fsck.fat use the first copy; this shows
// that every other copy is consistent on its own too.
func (d *crashDevice) withFATCopy(n int) (*crashDevice, error) {
	sec := make([]byte, crashSector)
	if _, err := d.ReadAt(sec, 0); err != nil {
		return nil, err
	}
	bs, err := ondisk.ParseBootSector(sec)
	if err != nil {
		return nil, err
	}
	g, err := bs.Geometry(d.Size())
	if err != nil {
		return nil, err
	}
	fat := make([]byte, g.FATBytes())
	if _, err := d.ReadAt(fat, g.FATOffset(n)); err != nil {
		return nil, err
	}
	c := &crashDevice{base: d.base, sectors: map[int64][]byte{}}
	for s, b := range d.sectors {
		c.sectors[s] = slices.Clone(b)
	}
	c.write(fat, g.FATOffset(0))
	return c, nil
}
