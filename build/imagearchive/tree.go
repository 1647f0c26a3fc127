package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// entryKind is what an entry of the image's file tree is.
type entryKind int

const (
	kindDir entryKind = iota
	kindFile
	kindSymlink
)

// entry is one path of the image's file tree. Files keep the host path their content is read
// from when the layer is written, so that the tree stays small.
type entry struct {
	kind   entryKind
	mode   fs.FileMode // permission bits plus setuid, setgid and sticky
	source string      // host file of a kindFile
	target string      // link target of a kindSymlink
}

// tree is the image's file tree, keyed by absolute clean path inside the image.
type tree struct {
	entries map[string]entry
}

// runtimeDirs are the directories a container runtime mounts over or a program expects; /tmp is
// world-writable with the sticky bit, as on any Linux system.
var runtimeDirs = map[string]fs.FileMode{
	"/dev":  0o755,
	"/etc":  0o755,
	"/proc": 0o555,
	"/run":  0o755,
	"/sys":  0o555,
	"/tmp":  0o777 | fs.ModeSticky,
}

func newTree() *tree {
	t := &tree{entries: map[string]entry{}}
	for dir, mode := range runtimeDirs {
		t.entries[dir] = entry{kind: kindDir, mode: mode}
	}
	return t
}

// add puts e at p, creating missing parent directories. The same entry twice is fine (two
// programs share a library); two different entries at one path are an error.
func (t *tree) add(p string, e entry) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("image path %q is not absolute", p)
	}
	p = path.Clean(p)
	if p == "/" {
		return fmt.Errorf("image path %q: the root cannot be replaced", p)
	}
	if err := t.addParents(p); err != nil {
		return err
	}
	if old, ok := t.entries[p]; ok {
		if old.kind == kindDir && e.kind == kindDir {
			return nil
		}
		if old != e {
			return fmt.Errorf("image path %s: %s conflicts with %s", p, describe(e), describe(old))
		}
		return nil
	}
	t.entries[p] = e
	return nil
}

// addParents creates p's missing parent directories. A parent that is a symlink in the image
// is an error: what lies beneath it must be added at the path it resolves to.
func (t *tree) addParents(p string) error {
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		old, ok := t.entries[dir]
		if !ok {
			t.entries[dir] = entry{kind: kindDir, mode: 0o755}
			continue
		}
		if old.kind != kindDir {
			return fmt.Errorf("image path %s: parent %s is %s, not a directory", p, dir, describe(old))
		}
	}
	return nil
}

func describe(e entry) string {
	switch e.kind {
	case kindDir:
		return "a directory"
	case kindSymlink:
		return fmt.Sprintf("a symlink to %s", e.target)
	default:
		return fmt.Sprintf("a copy of %s (mode %v)", e.source, e.mode)
	}
}

// addFile copies the host file source (symlinks followed) to dest in the image, keeping its
// permission, setuid and setgid bits.
func (t *tree) addFile(source, dest string) error {
	fi, err := os.Stat(source)
	if err != nil {
		return fmt.Errorf("add %s: %w", source, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("add %s: not a regular file (%v)", source, fi.Mode().Type())
	}
	return t.add(dest, entry{kind: kindFile, mode: fileMode(fi.Mode()), source: source})
}

// addSymlink makes link in the image point at target.
func (t *tree) addSymlink(link, target string) error {
	if target == "" {
		return fmt.Errorf("symlink %s: empty target", link)
	}
	return t.add(link, entry{kind: kindSymlink, target: target})
}

// maxSymlinks bounds the symlinks followed for one host path, as the kernel's limit of 40.
const maxSymlinks = 40

// addHostPath copies the host file p to the same path in the image, together with every symlink
// met on the way to it (such as /lib -> usr/lib on a merged-/usr system, or libfoo.so.1 ->
// libfoo.so.1.2.3), so that the path resolves in the image as it does on the host.
func (t *tree) addHostPath(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("add %s: not an absolute path", p)
	}
	resolved := "/"
	rest := strings.Split(filepath.Clean(p), "/")[1:]
	for links := 0; len(rest) > 0; {
		next := filepath.Join(resolved, rest[0])
		rest = rest[1:]
		fi, err := os.Lstat(next)
		if err != nil {
			return fmt.Errorf("add %s: %w", p, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > maxSymlinks {
			return fmt.Errorf("add %s: more than %d symlinks", p, maxSymlinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return fmt.Errorf("add %s: %w", p, err)
		}
		if err := t.addSymlink(next, target); err != nil {
			return fmt.Errorf("add %s: %w", p, err)
		}
		// Continue from the link's target: relative targets count from the link's directory.
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(filepath.Clean(target), "/"), rest...)
		rest = dropEmpty(rest)
	}
	return t.addFile(resolved, resolved)
}

func dropEmpty(parts []string) []string {
	kept := parts[:0]
	for _, s := range parts {
		if s != "" && s != "." {
			kept = append(kept, s)
		}
	}
	return kept
}

// fileMode keeps the bits of m that an image's file carries.
func fileMode(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// sortedPaths lists the tree's paths in byte order, so that every directory comes before what
// it holds and the layer is the same for the same inputs.
func (t *tree) sortedPaths() []string {
	paths := make([]string, 0, len(t.entries))
	for p := range t.entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}
