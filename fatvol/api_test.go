package fatvol

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Handles change times and attributes even after their file was removed, as futimens and fchmod.
func TestFileChtimesAndAttributes(t *testing.T) {
	img := mkfsImage(t, "64M")
	v, _ := openCounting(t, img, Options{})
	f, err := v.Create("a.txt")
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2024, 5, 6, 7, 8, 10, 0, time.Local)
	if err := f.Chtimes(time.Time{}, when); err != nil {
		t.Fatal(err)
	}
	if err := f.SetAttributes(ondisk.AttrReadOnly | ondisk.AttrHidden); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if !fi.ModTime().Equal(when) || fi.Mode().Perm() != 0o444 || fi.Sys().(*Attr).Attributes&ondisk.AttrHidden == 0 {
		t.Errorf("after Chtimes and SetAttributes: mtime %v mode %v attrs %#x", fi.ModTime(), fi.Mode(), fi.Sys().(*Attr).Attributes)
	}
	if err := f.SetAttributes(ondisk.AttrDirectory); err == nil {
		t.Error("SetAttributes accepted the directory bit")
	}
	if err := v.Remove("a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := f.Chtimes(time.Time{}, when.Add(time.Hour)); err != nil {
		t.Errorf("Chtimes on a removed open file: %v", err)
	}
	f.Close()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	judgeClean(t, img)
}

// Allocated reports the chain, including clusters fallocate kept past the end; SubdirCount
// counts subdirectories only.
func TestAllocatedAndSubdirs(t *testing.T) {
	img := mkfsImage(t, "64M")
	v, _ := openCounting(t, img, Options{})
	defer v.Close()
	cs := int64(v.Geometry().ClusterSize)
	for _, d := range []string{"d", "d/x", "d/y"} {
		if err := v.Mkdir(d); err != nil {
			t.Fatal(err)
		}
	}
	f, err := v.Create("d/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fallocate(0, 3*cs, true); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if a := fi.Sys().(*Attr); a.Size != 0 || a.Allocated != 3*cs {
		t.Errorf("after keep-size fallocate of 3 clusters: size %d allocated %d", a.Size, a.Allocated)
	}
	f.Close()
	di, _ := v.Stat("d")
	if a := di.Sys().(*Attr); a.Allocated != cs {
		t.Errorf("directory allocated %d, want one cluster (%d)", a.Allocated, cs)
	}
	if n, err := v.SubdirCount("d"); err != nil || n != 2 {
		t.Errorf("SubdirCount(d) = %d, %v; want 2", n, err)
	}
	if o := v.Options(); o.CacheBytes != DefaultCacheBytes || o.MaxRequest != DefaultMaxRequest {
		t.Errorf("Options() does not report the defaults it uses: %+v", o)
	}
}

// A chain that loops is reported as ErrCorrupt (and EIO), not followed forever.
func TestCorruptChainIsErrCorrupt(t *testing.T) {
	img := mkfsImage(t, "64M", "-F", "16")
	v, _ := openCounting(t, img, Options{})
	f, _ := v.Create("loop.bin")
	f.Write(make([]byte, 3*v.Geometry().ClusterSize))
	fi, _ := f.Stat()
	first := fi.Sys().(*Attr).FirstCluster
	f.Close()
	geo := v.Geometry()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	// Point the third cluster back at the first, in both FAT copies.
	raw, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for copy := 0; copy < geo.NumFATs; copy++ {
		var b [2]byte
		binary.LittleEndian.PutUint16(b[:], uint16(first))
		if _, err := raw.WriteAt(b[:], geo.FATOffset(copy)+int64(first+2)*2); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()
	v, _ = openCounting(t, img, Options{ReadOnly: true})
	defer v.Close()
	_, err = readAll(v, "loop.bin")
	if !errors.Is(err, ErrCorrupt) || Errno(err) != 5 {
		t.Errorf("reading a looping chain: %v (errno %d), want ErrCorrupt and EIO", err, Errno(err))
	}
}
