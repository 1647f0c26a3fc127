package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// hostShell is a dynamically linked program every Debian system has; the image built from it must
// run it with nothing but the image's files.
const hostShell = "/bin/sh"

// testImage builds an archive of /bin/sh (as the host resolves it), a setuid file under a new
// name and a symlink, and returns the archive's bytes.
func testImage(t *testing.T, suid string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.tar")
	opts, err := parseArgs([]string{
		"-o", out, "-name", "e2e.csi-fat.io/test:1",
		"-file", hostShell,
		"-file", suid + "=/opt/suid",
		"-symlink", "/etc/mtab=../proc/self/mounts",
		"--", "/bin/sh", "-c", "echo ok",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := build(opts); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// suidFile makes a host file with the setuid bit, as fusermount3 has.
func suidFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "helper")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho helper\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o750|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	return p
}

type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

// readTar returns a tar stream's entries in their order.
func readTar(t *testing.T, data []byte) []tarEntry {
	t.Helper()
	var entries []tarEntry
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, tarEntry{hdr, b})
	}
}

func sha256Of(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func unmarshal(t *testing.T, what string, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, b)
	}
}

func TestArchiveLayout(t *testing.T) {
	suid := suidFile(t)
	archive := testImage(t, suid)

	files := map[string][]byte{}
	for _, e := range readTar(t, archive) {
		if e.hdr.Typeflag == tar.TypeReg {
			files[e.hdr.Name] = e.data
		}
	}
	// Every blob is stored under its own digest.
	for name, b := range files {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && sha256Of(b) != "sha256:"+hexDigest {
			t.Errorf("blob %s has digest %s", name, sha256Of(b))
		}
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		if !ok {
			t.Fatalf("no blob for %+v", d)
		}
		if int64(len(b)) != d.Size {
			t.Fatalf("blob %s: %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
		}
		return b
	}

	var idx index
	unmarshal(t, "index.json", files["index.json"], &idx)
	if len(idx.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests", len(idx.Manifests))
	}
	if got := idx.Manifests[0].Annotations["io.containerd.image.name"]; got != "e2e.csi-fat.io/test:1" {
		t.Errorf("io.containerd.image.name = %q", got)
	}
	if got := idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != "1" {
		t.Errorf("org.opencontainers.image.ref.name = %q", got)
	}
	var man manifest
	unmarshal(t, "manifest", blob(idx.Manifests[0]), &man)
	var cfg imageConfig
	unmarshal(t, "config", blob(man.Config), &cfg)
	if len(man.Layers) != 1 {
		t.Fatalf("%d layers", len(man.Layers))
	}
	layer := blob(man.Layers[0])
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != sha256Of(layer) {
		t.Errorf("diff_ids %v, layer digest %s", cfg.RootFS.DiffIDs, sha256Of(layer))
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/bin/sh -c echo ok" {
		t.Errorf("entrypoint %q", cfg.Config.Entrypoint)
	}
	if len(cfg.Config.Env) == 0 || !strings.HasPrefix(cfg.Config.Env[0], "PATH=") {
		t.Errorf("env %q has no PATH", cfg.Config.Env)
	}

	var docker []dockerManifestEntry
	unmarshal(t, "manifest.json", files["manifest.json"], &docker)
	if len(docker) != 1 || strings.Join(docker[0].RepoTags, ",") != "e2e.csi-fat.io/test:1" ||
		docker[0].Config != "blobs/sha256/"+strings.TrimPrefix(man.Config.Digest, "sha256:") ||
		len(docker[0].Layers) != 1 || docker[0].Layers[0] != "blobs/sha256/"+strings.TrimPrefix(man.Layers[0].Digest, "sha256:") {
		t.Errorf("manifest.json %s does not match the OCI manifest %+v", files["manifest.json"], man)
	}

	checkLayer(t, readTar(t, layer), suid)
}

// checkLayer checks the layer's order, owners and times, the setuid file, and that the shell and
// everything its ELF header asks for (interpreter, needed libraries) resolve in the layer.
func checkLayer(t *testing.T, entries []tarEntry, suid string) {
	byPath := map[string]tarEntry{}
	var names []string
	for _, e := range entries {
		p := "/" + strings.TrimSuffix(e.hdr.Name, "/")
		names = append(names, p)
		byPath[p] = e
		if e.hdr.Uid != 0 || e.hdr.Gid != 0 || !e.hdr.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: owner %d:%d, time %v", p, e.hdr.Uid, e.hdr.Gid, e.hdr.ModTime)
		}
		if parent := path.Dir(p); parent != "/" {
			if pe, ok := byPath[parent]; !ok || pe.hdr.Typeflag != tar.TypeDir {
				t.Errorf("%s comes before its directory %s", p, parent)
			}
		}
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("layer entries are not sorted: %v", names)
	}
	for _, dir := range []string{"/dev", "/etc", "/proc", "/run", "/sys", "/tmp"} {
		if e, ok := byPath[dir]; !ok || e.hdr.Typeflag != tar.TypeDir {
			t.Errorf("no directory %s", dir)
		}
	}
	if byPath["/tmp"].hdr.Mode != 0o1777 {
		t.Errorf("/tmp mode %o", byPath["/tmp"].hdr.Mode)
	}

	want, err := os.ReadFile(suid)
	if err != nil {
		t.Fatal(err)
	}
	if e := byPath["/opt/suid"]; e.hdr == nil || e.hdr.Mode != 0o4750 || !bytes.Equal(e.data, want) {
		t.Errorf("/opt/suid: %+v, want mode 4750 and the content of %s", e.hdr, suid)
	}
	if e := byPath["/etc/mtab"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != "../proc/self/mounts" {
		t.Errorf("/etc/mtab: %+v", e.hdr)
	}

	shell := resolve(t, byPath, hostShell)
	hostResolved, err := filepath.EvalSymlinks(hostShell)
	if err != nil {
		t.Fatal(err)
	}
	if shell != hostResolved {
		t.Errorf("%s resolves to %s in the image, %s on the host", hostShell, shell, hostResolved)
	}
	f, err := elf.Open(hostResolved)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, err := io.ReadAll(p.Open())
			if err != nil {
				t.Fatal(err)
			}
			resolve(t, byPath, strings.TrimRight(string(interp), "\x00"))
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(needed) == 0 {
		t.Fatalf("%s needs no libraries: not the dynamic program this test wants", hostResolved)
	}
	for _, soname := range needed {
		found := false
		for p := range byPath {
			if path.Base(p) == soname {
				resolve(t, byPath, p)
				found = true
			}
		}
		if !found {
			t.Errorf("library %s of %s is not in the image", soname, hostShell)
		}
	}
}

// resolve follows p through the layer's symlinks to a regular file and returns its path.
func resolve(t *testing.T, byPath map[string]tarEntry, p string) string {
	t.Helper()
	resolved := "/"
	rest := strings.Split(strings.Trim(p, "/"), "/")
	for hops := 0; len(rest) > 0; {
		next := path.Join(resolved, rest[0])
		rest = rest[1:]
		e, ok := byPath[next]
		if !ok {
			t.Fatalf("%s: %s is not in the image", p, next)
		}
		if e.hdr.Typeflag != tar.TypeSymlink {
			resolved = next
			continue
		}
		if hops++; hops > 40 {
			t.Fatalf("%s: symlink loop", p)
		}
		if path.IsAbs(e.hdr.Linkname) {
			resolved = "/"
		}
		rest = append(strings.Split(strings.Trim(e.hdr.Linkname, "/"), "/"), rest...)
	}
	if byPath[resolved].hdr.Typeflag != tar.TypeReg {
		t.Fatalf("%s resolves to %s, not a file", p, resolved)
	}
	return resolved
}

// TestImageRunsInChroot unpacks the layer and runs the entrypoint with the layer as its root:
// the copied shell must find its loader and libraries there and nowhere else.
func TestImageRunsInChroot(t *testing.T) {
	testenv.RequireRoot(t, "chroot")
	archive := testImage(t, suidFile(t))
	var layer []byte
	var cfg imageConfig
	files := map[string][]byte{}
	for _, e := range readTar(t, archive) {
		files[e.hdr.Name] = e.data
	}
	var docker []dockerManifestEntry
	unmarshal(t, "manifest.json", files["manifest.json"], &docker)
	unmarshal(t, "config", files[docker[0].Config], &cfg)
	layer = files[docker[0].Layers[0]]

	root := t.TempDir()
	for _, e := range readTar(t, layer) {
		target := filepath.Join(root, e.hdr.Name)
		var err error
		switch e.hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(e.hdr.Linkname, target)
		case tar.TypeReg:
			err = os.WriteFile(target, e.data, os.FileMode(e.hdr.Mode).Perm())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(cfg.Config.Entrypoint[0], cfg.Config.Entrypoint[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = cfg.Config.Env
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("%q in the image: %v, output %q", cfg.Config.Entrypoint, err, out)
	}
}

// TestArchiveReproducible builds the same image twice, the second time from a source file with
// another modification time: the archives must be the same bytes.
func TestArchiveReproducible(t *testing.T) {
	suid := suidFile(t)
	first := testImage(t, suid)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(suid, later, later); err != nil {
		t.Fatal(err)
	}
	second := testImage(t, suid)
	if !bytes.Equal(first, second) {
		t.Errorf("two builds differ: %s vs %s", sha256Of(first), sha256Of(second))
	}
}

func TestTreeRejectsConflicts(t *testing.T) {
	tr := newTree()
	a := suidFile(t)
	if err := tr.addFile(a, "/bin/x"); err != nil {
		t.Fatal(err)
	}
	if err := tr.addFile(a, "/bin/x"); err != nil {
		t.Errorf("the same file twice: %v", err)
	}
	if err := tr.addSymlink("/bin/x", "y"); err == nil {
		t.Error("a symlink over a file was accepted")
	}
	if err := tr.addSymlink("/lib", "usr/lib"); err != nil {
		t.Fatal(err)
	}
	if err := tr.addFile(a, "/lib/x"); err == nil {
		t.Error("a file under a symlink was accepted")
	}
	if err := tr.addFile(a, "relative"); err == nil {
		t.Error("a relative image path was accepted")
	}
}

func TestParseLddMissingLibrary(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgone.so.3 => not found\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f47)\n"
	if _, err := parseLdd("/usr/bin/prog", []byte(out)); err == nil || !strings.Contains(err.Error(), "libgone.so.3") {
		t.Errorf("a missing library gave %v", err)
	}
}

func TestParseArgsWantsATag(t *testing.T) {
	for _, name := range []string{"e2e.csi-fat.io/busybox", "localhost:5000/busybox", "x@sha256:00"} {
		if _, err := parseArgs([]string{"-o", "x.tar", "-name", name, "--", "/bin/sh"}, io.Discard); err == nil {
			t.Errorf("-name %s was accepted", name)
		}
	}
}
