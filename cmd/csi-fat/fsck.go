package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
)

func init() {
	register(&command{name: "fsck", summary: "check a FAT file system read-only (like fsck.fat -n)", run: runFsck})
}

// Exit codes of csi-fat fsck.
const (
	fsckClean    = 0 // no errors (warnings may have been printed)
	fsckProblems = 1 // errors found
	fsckFailed   = 2 // could not check: usage, missing path, I/O error, not a FAT file system
)

func newFsckFlagSet(out io.Writer) (*flag.FlagSet, *bool, *bool) {
	fs := flag.NewFlagSet("fsck", flag.ContinueOnError)
	fs.SetOutput(out)
	noChange := fs.Bool("n", false, "no changes: check only (the only mode for now; without -n the check runs all the same, with a notice)")
	verbose := fs.Bool("v", false, "verbose: also print the volume's type, cluster counts and the number of files and directories")
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: csi-fat fsck [-n] [-v] PATH\n\n"+
			"Check the FAT12/16/32 file system on PATH (an image file or a block device) without changing it, by the\n"+
			"rules of dosfstools' fsck.fat 4.2. Each problem is printed with the path it concerns; problems that\n"+
			"fsck.fat would only mention are marked \"warning:\". A summary line follows: \"PATH: N files, U/T clusters\".\n"+
			"Repair is not supported yet.\n\n"+
			"exit status: 0 clean (warnings allowed), 1 errors found, 2 could not check (bad usage, missing PATH,\n"+
			"I/O error, not a FAT file system).\n\noptions:\n")
		fs.PrintDefaults()
	}
	return fs, noChange, verbose
}

func runFsck(args []string) int { return fsckMain(args, os.Stdout, os.Stderr) }

func fsckMain(args []string, stdout, stderr io.Writer) int {
	fs, noChange, verbose := newFsckFlagSet(stderr)
	if ok, code := parseFlags(fs, args, fsckFailed); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "csi-fat fsck: want exactly one PATH after the options, got %d arguments %q\n", fs.NArg(), fs.Args())
		fs.Usage()
		return fsckFailed
	}
	if !*noChange {
		fmt.Fprintln(stderr, "csi-fat fsck: repair is not supported; checking only")
	}
	path := fs.Arg(0)
	dev, err := blockdev.Open(path, true)
	if err != nil {
		fmt.Fprintf(stderr, "csi-fat fsck: %v\n", err)
		return fsckFailed
	}
	defer dev.Close()
	rep, err := fsck.Check(dev)
	if err != nil {
		fmt.Fprintf(stderr, "csi-fat fsck: %s: %v\n", path, err)
		return fsckFailed
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(stdout, p.String())
	}
	if rep.Omitted > 0 {
		fmt.Fprintf(stdout, "... and %d more problems not listed\n", rep.Omitted)
	}
	if *verbose {
		fmt.Fprintf(stdout, "%s: %s, %d files, %d directories, %d clusters: %d used, %d free, %d lost\n",
			path, rep.Type, rep.Files, rep.Dirs, rep.Clusters, rep.UsedClusters, rep.FreeClusters, rep.LostClusters)
	}
	fmt.Fprintf(stdout, "%s: %d files, %d/%d clusters\n", path, rep.Files+rep.Dirs, rep.UsedClusters, rep.Clusters)
	if !rep.Clean() {
		return fsckProblems
	}
	return fsckClean
}
