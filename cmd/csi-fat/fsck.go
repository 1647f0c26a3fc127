package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/csi-fat/csi-fat/fatvol/fsck"
)

func init() {
	register(&command{name: "fsck", summary: "check a FAT file system (like fsck.fat -n), or repair what is safe (-a)", run: runFsck})
}

// Exit codes of csi-fat fsck: fsck.fat's 0 and 1, its 2 widened to every failure to check, and
// fsck(8)'s 4 for what -a leaves, since fsck.fat -a repairs everything and never needs it.
const (
	fsckClean       = 0 // no errors (warnings may have been printed)
	fsckProblems    = 1 // errors found (-n), or found and all repaired (-a)
	fsckFailed      = 2 // could not check: usage, missing path, I/O error, not a FAT file system, held by a writer (-a)
	fsckUncorrected = 4 // -a: errors left that are not safe to repair; nothing was written
)

// fsckFlags are the options of csi-fat fsck.
type fsckFlags struct {
	noChange, auto, verbose *bool
	partition               *string
}

func newFsckFlagSet(out io.Writer) (*flag.FlagSet, fsckFlags) {
	fs := flag.NewFlagSet("fsck", flag.ContinueOnError)
	fs.SetOutput(out)
	f := fsckFlags{
		noChange: fs.Bool("n", false, "no changes: check only (also what happens without -a)"),
		auto:     fs.Bool("a", false, "automatically repair what is safe to repair, like fsck.fat -a"),
		verbose:  fs.Bool("v", false, "verbose: also print the volume's type, cluster counts and the number of files and directories"),
		partition: fs.String("partition", "", "check partition `N` of a partitioned PATH (its number, or a GPT partition's unique GUID)\n"+
			"(default: its first FAT partition)"),
	}
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: csi-fat fsck [-n | -a] [-v] [--partition N] PATH\n\n"+
			"Check the FAT12/16/32 file system on PATH (an image file or a block device) by the rules of\n"+
			"dosfstools' fsck.fat 4.2. Each problem is printed with the path it concerns; problems that fsck.fat\n"+
			"would only mention are marked \"warning:\". A summary line follows: \"PATH: N files, U/T clusters\".\n\n"+
			"With -a, the problems a crash or an unclean unmount leaves are repaired as fsck.fat -a repairs them:\n"+
			"lost clusters, the FSINFO free count and next-free hint, the dirty bit, FAT copies that differ from\n"+
			"an intact first FAT, and file sizes out of step with their cluster chains. Lost clusters are freed,\n"+
			"where fsck.fat -a saves them as FSCKnnnn.REC files. When any other error is found (cross-linked or\n"+
			"broken chains, bad entries, a broken boot sector, damaged directories), nothing is written: use\n"+
			"fsck.fat on a copy.\n\n"+
			"With -a, PATH is claimed for writing (an OFD lock on an image file, O_EXCL on a block device) and\n"+
			"refused, with nothing written, while another writer (csi-fat mount, mkfs, another repair, the\n"+
			"driver, a kernel mount) holds it. Without -a it is checked beside a writer, with a warning that it\n"+
			"may change while it is read.\n\n"+
			"exit status: 0 clean (warnings allowed); 1 errors found (-n), or found and all repaired (-a);\n"+
			"2 could not check (bad usage, missing PATH, I/O error, not a FAT file system, -a on a PATH another\n"+
			"writer holds); 4 (-a) errors left that are not safe to repair, nothing written.\n\n"+
			"A partitioned PATH (an MBR or GPT partition table, as on SD cards and most sticks) is checked in its\n"+
			"first FAT partition, or the one --partition names; nothing outside it is read or written. A FAT file\n"+
			"system on the whole medium (a superfloppy) is checked whole.\n\noptions:\n")
		fs.PrintDefaults()
	}
	return fs, f
}

func runFsck(args []string) int { return fsckMain(args, os.Stdout, os.Stderr) }

func fsckMain(args []string, stdout, stderr io.Writer) int {
	fs, f := newFsckFlagSet(stderr)
	if ok, code := parseFlags(fs, args, fsckFailed); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "csi-fat fsck: want exactly one PATH after the options, got %d arguments %q\n", fs.NArg(), fs.Args())
		fs.Usage()
		return fsckFailed
	}
	if *f.noChange && *f.auto {
		fmt.Fprintln(stderr, "csi-fat fsck: -n and -a exclude each other")
		fs.Usage()
		return fsckFailed
	}
	if !*f.noChange && !*f.auto {
		fmt.Fprintln(stderr, "csi-fat fsck: no -a: checking only")
	}
	path := fs.Arg(0)
	dev, err := openMedium(path, claimFor(!*f.auto), *f.partition, stderr, "fsck")
	if err != nil {
		fmt.Fprintf(stderr, "csi-fat fsck: %v\n", err)
		return fsckFailed
	}
	defer dev.Close()
	if w, ok := dev.(interface{ Writer() string }); ok {
		warnWriter(stderr, "fsck", path, w.Writer(), "checking it")
	}
	if !*f.auto {
		rep, err := fsck.Check(dev)
		if err != nil {
			fmt.Fprintf(stderr, "csi-fat fsck: %s: %v\n", path, err)
			return fsckFailed
		}
		printReport(stdout, path, rep, *f.verbose)
		if !rep.Clean() {
			return fsckProblems
		}
		return fsckClean
	}
	res, err := fsck.Repair(dev)
	if err != nil {
		fmt.Fprintf(stderr, "csi-fat fsck: %s: %v\n", path, err)
		if res != nil && len(res.Repaired) > 0 {
			fmt.Fprintf(stderr, "csi-fat fsck: %s: the repair did not finish; run csi-fat fsck -a again\n", path)
		}
		return fsckFailed
	}
	return reportRepair(stdout, path, res, *f.verbose)
}

// reportRepair prints what -a found and did and returns the exit code.
func reportRepair(out io.Writer, path string, res *fsck.RepairResult, verbose bool) int {
	switch {
	case res.Before.Clean():
		printReport(out, path, res.Before, verbose)
		return fsckClean
	case len(res.Unrepairable) > 0:
		printProblems(out, res.Before)
		fmt.Fprintf(out, "\nNot repaired, nothing written: %d error(s) are not safe to repair automatically:\n", len(res.Unrepairable))
		for _, p := range res.Unrepairable {
			fmt.Fprintln(out, "  "+p.String())
		}
		printSummary(out, path, res.Before, verbose)
		return fsckUncorrected
	}
	printProblems(out, res.Before)
	fmt.Fprintf(out, "\nRepaired %d error(s); the file system was changed.\n", len(res.Repaired))
	if !res.After.Clean() {
		fmt.Fprintln(out, "Errors left after the repair:")
		for _, p := range res.After.Errors() {
			fmt.Fprintln(out, "  "+p.String())
		}
		printSummary(out, path, res.After, verbose)
		return fsckUncorrected
	}
	printSummary(out, path, res.After, verbose)
	return fsckProblems
}

// printReport prints a check's problems and its summary.
func printReport(out io.Writer, path string, rep *fsck.Report, verbose bool) {
	printProblems(out, rep)
	printSummary(out, path, rep, verbose)
}

func printProblems(out io.Writer, rep *fsck.Report) {
	for _, p := range rep.Problems {
		fmt.Fprintln(out, p.String())
	}
	if rep.Omitted > 0 {
		fmt.Fprintf(out, "... and %d more problems not listed\n", rep.Omitted)
	}
}

func printSummary(out io.Writer, path string, rep *fsck.Report, verbose bool) {
	if verbose {
		fmt.Fprintf(out, "%s: %s, %d files, %d directories, %d clusters: %d used, %d free, %d lost\n",
			path, rep.Type, rep.Files, rep.Dirs, rep.Clusters, rep.UsedClusters, rep.FreeClusters, rep.LostClusters)
	}
	fmt.Fprintf(out, "%s: %d files, %d/%d clusters\n", path, rep.Files+rep.Dirs, rep.UsedClusters, rep.Clusters)
}
