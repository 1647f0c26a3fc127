// Command imagearchive writes a container image archive (an OCI image layout in a tar file, with
// Docker's manifest.json beside it) from files of the machine it runs on, without a registry,
// base image or container engine. Each program is copied with the shared libraries ldd finds for
// it; setuid bits are kept; /dev, /etc, /proc, /run, /sys and /tmp exist. The same inputs give
// the same bytes: entries are sorted, owned by root and carry one fixed time.
//
//	imagearchive -o ARCHIVE -name REF [-file HOST[=IMAGE]]... [-symlink IMAGE=TARGET]... \
//		[-env KEY=VALUE]... [--] ENTRYPOINT [ARG]...
//
// `ctr -n k8s.io images import ARCHIVE` then lists the image as REF; `docker load` reads it too.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// defaultPath is the PATH of Debian's images, so that programs the image's programs exec by name
// (fusermount3, mount) are found.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// options are the command line's choices.
type options struct {
	output     string
	name       string
	files      []string // HOST or HOST=IMAGE
	symlinks   []string // IMAGE=TARGET
	env        []string // KEY=VALUE
	entrypoint []string
	created    time.Time
}

func main() {
	opts, err := parseArgs(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagearchive: %v\n", err)
		os.Exit(2)
	}
	if err := build(opts); err != nil {
		fmt.Fprintf(os.Stderr, "imagearchive: %v\n", err)
		os.Exit(1)
	}
}

func parseArgs(args []string, out io.Writer) (options, error) {
	var opts options
	var files, symlinks, env listFlag
	fs := flag.NewFlagSet("imagearchive", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&opts.output, "o", "", "archive to write (replaced atomically)")
	fs.StringVar(&opts.name, "name", "", "image reference with a tag, e.g. ghcr.io/csi-fat/csi-fat:e2e")
	fs.Var(&files, "file", "HOST[=IMAGE]: copy a host file and the shared libraries it needs; without =IMAGE\n"+
		"it keeps its path and the symlinks on the way to it (may be repeated)")
	fs.Var(&symlinks, "symlink", "IMAGE=TARGET: a symlink in the image (may be repeated)")
	fs.Var(&env, "env", "KEY=VALUE in the image's environment (may be repeated; PATH defaults to Debian's)")
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: imagearchive -o ARCHIVE -name REF [-file HOST[=IMAGE]]... [-symlink IMAGE=TARGET]...\n"+
			"                    [-env KEY=VALUE]... [--] ENTRYPOINT [ARG]...\n\n"+
			"The archive's times are $SOURCE_DATE_EPOCH (seconds), else 0.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return opts, err
	}
	opts.files, opts.symlinks, opts.entrypoint = files, symlinks, fs.Args()
	opts.env = withDefaultPath(env)
	switch {
	case opts.output == "":
		return opts, errors.New("-o is required")
	case opts.name == "":
		return opts, errors.New("-name is required")
	case !strings.Contains(opts.name[strings.LastIndex(opts.name, "/")+1:], ":") || strings.Contains(opts.name, "@"):
		return opts, fmt.Errorf("-name %q: want NAME:TAG", opts.name)
	case len(opts.entrypoint) == 0:
		return opts, errors.New("an entrypoint is required after the flags")
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return opts, err
	}
	opts.created = created
	return opts, nil
}

func withDefaultPath(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			return env
		}
	}
	return append([]string{defaultPath}, env...)
}

// sourceDateEpoch is the fixed time of every entry: $SOURCE_DATE_EPOCH as reproducible builds
// define it, else the Unix epoch.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// build assembles the tree, writes the layer and the archive to a temporary file next to the
// output, and renames it into place.
func build(opts options) error {
	t, err := assemble(opts)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	if err := writeLayer(&layer, t, opts.created); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(opts.output), "."+filepath.Base(opts.output)+".*")
	if err != nil {
		return fmt.Errorf("create %s: %w", opts.output, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	img := image{name: opts.name, entrypoint: opts.entrypoint, env: opts.env, created: opts.created}
	if err := writeArchive(tmp, img, layer.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", opts.output, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", opts.output, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", opts.output, err)
	}
	if err := os.Rename(tmp.Name(), opts.output); err != nil {
		return fmt.Errorf("write %s: %w", opts.output, err)
	}
	return nil
}

// assemble builds the image's file tree from the options: the files, the shared libraries of
// each (at their host paths, with the symlinks on the way), and the symlinks.
func assemble(opts options) (*tree, error) {
	t := newTree()
	libs := map[string]bool{}
	for _, spec := range opts.files {
		host, dest, renamed := strings.Cut(spec, "=")
		var err error
		if renamed {
			err = t.addFile(host, dest)
		} else {
			err = t.addHostPath(host)
		}
		if err != nil {
			return nil, fmt.Errorf("-file %s: %w", spec, err)
		}
		needed, err := sharedLibraries(host)
		if err != nil {
			return nil, fmt.Errorf("-file %s: %w", spec, err)
		}
		for _, lib := range needed {
			libs[lib] = true
		}
	}
	sortedLibs := make([]string, 0, len(libs))
	for lib := range libs {
		sortedLibs = append(sortedLibs, lib)
	}
	sort.Strings(sortedLibs)
	for _, lib := range sortedLibs {
		if err := t.addHostPath(lib); err != nil {
			return nil, fmt.Errorf("shared library: %w", err)
		}
	}
	for _, spec := range opts.symlinks {
		link, target, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("-symlink %s: want IMAGE=TARGET", spec)
		}
		if err := t.addSymlink(link, target); err != nil {
			return nil, fmt.Errorf("-symlink %s: %w", spec, err)
		}
	}
	return t, nil
}
