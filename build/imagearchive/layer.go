package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"
)

// writeLayer writes the tree as an uncompressed layer tar: entries in byte order of their paths,
// owned by root, all with the time mtime, so that the same inputs give the same bytes.
func writeLayer(w io.Writer, t *tree, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, p := range t.sortedPaths() {
		e := t.entries[p]
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    tarMode(e.mode),
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		switch e.kind {
		case kindDir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case kindSymlink:
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = e.target
			hdr.Mode = 0o777
		case kindFile:
			if err := writeFileEntry(tw, hdr, e.source); err != nil {
				return err
			}
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("layer entry %s: %w", p, err)
		}
	}
	return tw.Close()
}

// writeFileEntry copies the host file source into the layer under hdr.
func writeFileEntry(tw *tar.Writer, hdr *tar.Header, source string) error {
	f, err := os.Open(source)
	if err != nil {
		return fmt.Errorf("layer entry %s: %w", hdr.Name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("layer entry %s: %w", hdr.Name, err)
	}
	hdr.Typeflag = tar.TypeReg
	hdr.Size = fi.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("layer entry %s: %w", hdr.Name, err)
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("layer entry %s from %s: %w", hdr.Name, source, err)
	}
	return nil
}

// tarMode turns Go's file mode bits into the tar header's Unix mode (c_ISUID etc.).
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
