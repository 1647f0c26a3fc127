// Package fuzzimage turns fuzz inputs into FAT images and builds the seed images the fuzz targets
// of fatvol, fatvol/ondisk and fatvol/fsck start from. It is test support: nothing in the driver
// imports it.
package fuzzimage

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
)

// MaxDeviceSize bounds the device a fuzz input stands for. Inputs hold only the start of an image
// (mkfs output ends in zeros, which seeds drop); the device is as large as the boot sector says,
// up to this size, and reads past the input return zeros.
const MaxDeviceSize = 4 << 20

const pageSize = 4096

// Device is an in-memory blockdev.Device over a fuzz input: the input is its first bytes, zeros
// follow up to its size, and writes go to copied pages so the input is never changed.
type Device struct {
	base    []byte
	size    int64
	written map[int64][]byte // page number -> page content, for pages written to
	closed  bool
}

var _ blockdev.Device = (*Device)(nil)

// NewDevice returns a device holding input, sized as its boot sector declares (total sectors
// times bytes per sector) when that lies between len(input) and MaxDeviceSize, else
// len(input).
func NewDevice(input []byte) *Device {
	size := int64(len(input))
	if declared := DeclaredSize(input); declared > size && declared <= MaxDeviceSize {
		size = declared
	}
	return &Device{base: input, size: size, written: map[int64][]byte{}}
}

// DeclaredSize is the volume size the boot sector at the start of image claims, 0 when it has
// no boot sector to read.
func DeclaredSize(image []byte) int64 {
	if len(image) < 36 {
		return 0
	}
	le := binary.LittleEndian
	bps := int64(le.Uint16(image[11:]))
	total := int64(le.Uint16(image[19:]))
	if total == 0 {
		total = int64(le.Uint32(image[32:]))
	}
	return bps * total
}

func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: %w", off, blockdev.ErrOutOfRange)
	}
	if off >= d.size {
		return 0, io.EOF
	}
	want := len(p)
	p = p[:min(int64(len(p)), d.size-off)]
	for done := 0; done < len(p); {
		at := off + int64(done)
		page, in := at/pageSize, at%pageSize
		n := min(len(p)-done, int(pageSize-in))
		dst := p[done : done+n]
		if w, ok := d.written[page]; ok {
			copy(dst, w[in:])
		} else {
			clear(dst[d.fromBase(dst, at):])
		}
		done += n
	}
	if len(p) < want {
		return len(p), io.EOF
	}
	return len(p), nil
}

// fromBase copies what the input holds at off into dst and returns how many bytes it had.
func (d *Device) fromBase(dst []byte, off int64) int {
	if off >= int64(len(d.base)) {
		return 0
	}
	return copy(dst, d.base[off:])
}

func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > d.size {
		return 0, fmt.Errorf("write %d bytes at %d on a %d-byte device: %w", len(p), off, d.size, blockdev.ErrOutOfRange)
	}
	for done := 0; done < len(p); {
		at := off + int64(done)
		page, in := at/pageSize, at%pageSize
		w, ok := d.written[page]
		if !ok {
			w = make([]byte, pageSize)
			d.fromBase(w, page*pageSize)
			d.written[page] = w
		}
		done += copy(w[in:], p[done:])
	}
	return len(p), nil
}

func (d *Device) WritevAt(bufs [][]byte, off int64) (int, error) {
	total := 0
	for _, b := range bufs {
		n, err := d.WriteAt(b, off+int64(total))
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (d *Device) StartWriteback(off, length int64) error { return nil }
func (d *Device) Flush() error                           { return nil }
func (d *Device) Size() int64                            { return d.size }
func (d *Device) LogicalBlockSize() int                  { return blockdev.ImageLogicalBlockSize }
func (d *Device) BlockSize() int {
	return blockdev.ChooseBlockSize(d.size, blockdev.ImageLogicalBlockSize, pageSize)
}
func (d *Device) Close() error { d.closed = true; return nil }

// Closed tells whether Close was called.
func (d *Device) Closed() bool { return d.closed }

// Bytes returns the whole current content of the device.
func (d *Device) Bytes() []byte {
	b := make([]byte, d.size)
	d.ReadAt(b, 0)
	return b
}
