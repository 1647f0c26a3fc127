package ondisk_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"github.com/csi-fat/csi-fat/internal/fuzzimage"
)

// dosfstoolsDir holds dosfstools' test images as xxd dumps.
var dosfstoolsDir = filepath.Join("..", "..", "..", "shared", "dosfstools-tests")

// addImageHeads seeds f with the first sectors of mkfs.fat's images and dosfstools' test images.
func addImageHeads(f *testing.F, from func([]byte) []byte) {
	for _, s := range fuzzimage.MkfsSeeds(f) {
		f.Add(from(s.Image))
	}
	_, heads := fuzzimage.DosfstoolsSeeds(f, dosfstoolsDir)
	for _, s := range heads {
		f.Add(from(s.Image))
	}
}

// FuzzBootSector parses boot sectors and derives their geometry: no input may panic, and every
// geometry accepted must describe a layout that fits in the volume and the device, with a FAT
// large enough for every cluster.
func FuzzBootSector(f *testing.F) {
	addImageHeads(f, func(img []byte) []byte { return img[:min(len(img), 512)] })
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := ondisk.ParseBootSector(p)
		if err != nil {
			if len(p) >= 512 {
				t.Fatalf("512 bytes refused: %v", err)
			}
			return
		}
		// Marshal writes back exactly what Parse read.
		again := bytes.Clone(p[:512])
		b.Marshal(again)
		b2, err := ondisk.ParseBootSector(again)
		if err != nil || *b2 != *b {
			t.Fatalf("marshal round trip: %+v, then %+v (%v)", b, b2, err)
		}
		for _, device := range []int64{0, int64(len(p)), fuzzimage.DeclaredSize(p)} {
			g, err := b.Geometry(device)
			if err != nil {
				continue
			}
			checkGeometry(t, g, device)
		}
	})
}

func checkGeometry(t *testing.T, g ondisk.Geometry, device int64) {
	t.Helper()
	ss := int64(g.SectorSize)
	switch {
	case g.SectorSize < 512 || g.SectorSize > 4096 || g.SectorSize&(g.SectorSize-1) != 0:
		t.Fatalf("sector size %d", g.SectorSize)
	case g.SectorsPerCluster <= 0 || g.SectorsPerCluster&(g.SectorsPerCluster-1) != 0:
		t.Fatalf("sectors per cluster %d", g.SectorsPerCluster)
	case g.ClusterSize != g.SectorSize*g.SectorsPerCluster || g.ClusterSize > 1<<21:
		t.Fatalf("cluster size %d", g.ClusterSize)
	case g.Clusters < 1:
		t.Fatalf("no data clusters: %+v", g)
	case g.FirstDataSector+int64(g.Clusters)*int64(g.SectorsPerCluster) > g.TotalSectors:
		t.Fatalf("%d clusters from sector %d pass the %d sectors of the volume", g.Clusters, g.FirstDataSector, g.TotalSectors)
	case device > 0 && g.TotalSectors*ss > device:
		t.Fatalf("volume of %d bytes on a device of %d", g.TotalSectors*ss, device)
	case g.FATOffset(g.NumFATs-1)+g.FATBytes() > g.RootDirSector*ss || g.RootDirSector+g.RootDirSectors != g.FirstDataSector:
		t.Fatalf("FATs and root directory overlap: %+v", g)
	case (int64(g.Clusters)+2)*int64(g.Type) > g.FATBytes()*8:
		t.Fatalf("FAT of %d bytes cannot hold %d clusters", g.FATBytes(), g.Clusters)
	case g.Type == ondisk.FAT32 && !g.ValidCluster(g.RootCluster):
		t.Fatalf("root cluster %d", g.RootCluster)
	case g.Type != ondisk.FAT32 && g.RootEntries == 0:
		t.Fatalf("%s without root entries", g.Type)
	case g.Type == ondisk.FAT12 && g.Clusters > ondisk.MaxClustersFAT12, g.Type == ondisk.FAT16 && g.Clusters > ondisk.MaxClustersFAT16:
		t.Fatalf("%d clusters on %s", g.Clusters, g.Type)
	case g.ActiveFAT >= g.NumFATs:
		t.Fatalf("active FAT %d of %d", g.ActiveFAT, g.NumFATs)
	case g.FSInfoSector >= g.ReservedSectors || g.BackupBootSector >= g.ReservedSectors:
		t.Fatalf("FSINFO %d or backup %d outside the %d reserved sectors", g.FSInfoSector, g.BackupBootSector, g.ReservedSectors)
	}
}

// FuzzDirEntries decodes a directory's raw entries: short entries must encode back to the same
// bytes, long-name entries to the same fields, and a long name's units must come back from
// LFNEntries after splitting it again.
func FuzzDirEntries(f *testing.F) {
	// The fixed root directory of FAT12/16, or the root cluster of FAT32: where entries are.
	addImageHeads(f, func(img []byte) []byte { return fuzzimage.RootDir(img, 1024) })
	f.Fuzz(func(t *testing.T, p []byte) {
		for o := 0; o+ondisk.DirEntrySize <= len(p); o += ondisk.DirEntrySize {
			raw := p[o : o+ondisk.DirEntrySize]
			if ondisk.IsLongName(raw) {
				l := ondisk.DecodeLFN(raw)
				if l.Ord > 0x1F {
					t.Fatalf("ordinal %d", l.Ord)
				}
				enc := make([]byte, ondisk.DirEntrySize)
				l.Encode(enc)
				if l2 := ondisk.DecodeLFN(enc); l2 != l || !ondisk.IsLongName(enc) {
					t.Fatalf("long-name round trip: %+v, then %+v", l, l2)
				}
				units := l.LFNUnits()
				if len(units) > ondisk.CharsPerLFN {
					t.Fatalf("%d units in one entry", len(units))
				}
				checkLFNSplit(t, units)
				continue
			}
			e := ondisk.DecodeDirEntry(raw)
			enc := make([]byte, ondisk.DirEntrySize)
			e.Encode(enc)
			if !bytes.Equal(enc, raw) {
				t.Fatalf("entry round trip: % x, then % x", raw, enc)
			}
			for _, mode := range []ondisk.ShortNameMode{ondisk.ShortNameMixed, ondisk.ShortNameLower, ondisk.ShortNameWin95, ondisk.ShortNameWinNT} {
				shown := e.Name.DisplayName(e.NTCase, mode, nil)
				if !utf8.ValidString(shown) || strings.ContainsRune(shown, 0) {
					t.Fatalf("short name %q shown as %q", e.Name[:], shown)
				}
			}
			ondisk.LFNChecksum(e.Name)
			ondisk.DecodeTime(e.ModDate, e.ModTime, e.CreateTenth, time.UTC)
		}
	})
}

// checkLFNSplit splits the name held in units (valid ones only) into entries and joins them again.
func checkLFNSplit(t *testing.T, units []uint16) {
	t.Helper()
	name := string(utf16.Decode(units))
	clean, err := ondisk.CleanName(name)
	if err != nil || clean != name || strings.ContainsRune(name, utf8.RuneError) {
		return
	}
	entries := ondisk.LFNEntries(name, 0x5A)
	var joined []uint16
	for i := len(entries) - 1; i >= 0; i-- {
		if int(entries[i].Ord) != len(entries)-i || entries[i].Last != (i == 0) || entries[i].Checksum != 0x5A {
			t.Fatalf("%q: entry %d is %+v", name, i, entries[i])
		}
		joined = append(joined, entries[i].LFNUnits()...)
	}
	if got := string(utf16.Decode(joined)); got != name {
		t.Fatalf("split %q and joined %q", name, got)
	}
}

// FuzzShortName runs the name rules on any string: cleaning is idempotent, a short name made for a
// long one is valid and distinct from the taken ones, and a typed 8.3 name parses to a valid short
// name that parses again to itself.
func FuzzShortName(f *testing.F) {
	for _, s := range []string{"README.TXT", "a long file name.text", "readme.txt", ".bashrc", "...", "a..b", "Ünïcødé.tXt",
		"CON", "x/y", "a\x00b", " lead", "trail ", "trail.", "ab~1.c", "\xe5bc", "\x05\xe5.TXT", "日本語のファイル名.txt",
		strings.Repeat("x", 300), "a.b.c.d", "+,;=[].x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		clean, err := ondisk.CleanName(s)
		if err == nil {
			if again, err := ondisk.CleanName(clean); err != nil || again != clean {
				t.Fatalf("CleanName(%q) = %q, then %q, %v", s, clean, again, err)
			}
			if strings.ContainsAny(clean, "/\x00") || clean == "." || clean == ".." || ondisk.UTF16Len(clean) > ondisk.MaxLFNUnits {
				t.Fatalf("CleanName(%q) = %q", s, clean)
			}
		}
		taken := map[ondisk.ShortName]bool{}
		for i := 0; i < 3; i++ {
			for _, mode := range []ondisk.ShortNameMode{ondisk.ShortNameMixed, ondisk.ShortNameWinNT} {
				sn, _, _, err := ondisk.MakeShortName(s, mode, nil, func(n ondisk.ShortName) bool { return taken[n] })
				if err != nil {
					continue
				}
				if !sn.Valid() || taken[sn] {
					t.Fatalf("MakeShortName(%q) = %q (valid %v, taken %v)", s, sn[:], sn.Valid(), taken[sn])
				}
				taken[sn] = true
			}
		}
		if sn, ok := ondisk.ParseShortName(s, nil); ok {
			if !sn.Valid() {
				t.Fatalf("ParseShortName(%q, nil) = invalid %q", s, sn[:])
			}
			if again, ok := ondisk.ParseShortName(sn.String(), nil); !ok || again != sn {
				t.Fatalf("ParseShortName(%q, nil) = %q, shown %q, parsed again %q %v", s, sn[:], sn.String(), again[:], ok)
			}
		}
		ondisk.FoldName(s)
	})
}
