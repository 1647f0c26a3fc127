// Command fusecompare is the helper of bench/fuse.sh for the many-files workloads: it writes a
// set of files with one write(2) each and syncs, so the benchmark measures the file system and
// not a process per file or a shell's small stdio writes; and it verifies such a set later.
//
//	fusecompare write [-fsync FILE] DIR COUNT SIZE   create DIR, COUNT files of SIZE bytes,
//	                                                 syncfs, then fsync FILE (the image file)
//	fusecompare verify DIR COUNT SIZE                check DIR holds exactly those files
//	fusecompare loopback DIR MNT                     serve DIR through go-fuse's loopback file
//	                                                 system on MNT until SIGTERM or SIGINT
//
// On SIGTERM or SIGINT (a benchmark's timeout) it says how many files were done and exits 124.
// Being the process the timeout signals (no shell between) is what makes that report reliable.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 3 && args[0] == "loopback" {
		if err := serveLoopback(args[1], args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "fusecompare: %v\n", err)
			return 1
		}
		return 0
	}
	if len(args) < 1 || (args[0] != "write" && args[0] != "verify") {
		fmt.Fprintln(os.Stderr, "usage: fusecompare write [-fsync FILE] DIR COUNT SIZE | verify DIR COUNT SIZE | loopback DIR MNT")
		return 2
	}
	verb := args[0]
	flags := flag.NewFlagSet(verb, flag.ContinueOnError)
	fsyncPath := flags.String("fsync", "", "after writing, fsync this file too (write only)")
	if err := flags.Parse(args[1:]); err != nil {
		return 2
	}
	operands := flags.Args()
	if len(operands) != 3 {
		fmt.Fprintf(os.Stderr, "fusecompare %s: want DIR COUNT SIZE, got %q\n", verb, operands)
		return 2
	}
	count, err1 := strconv.Atoi(operands[1])
	size, err2 := strconv.Atoi(operands[2])
	if err1 != nil || err2 != nil || count < 0 || size < 0 {
		fmt.Fprintf(os.Stderr, "fusecompare: COUNT and SIZE must be non-negative integers, got %q %q\n", operands[1], operands[2])
		return 2
	}
	var done atomic.Int64
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		fmt.Fprintf(os.Stderr, "fusecompare %s: stopped after %d of %d files\n", verb, done.Load(), count)
		os.Exit(124)
	}()
	var err error
	if verb == "verify" {
		err = verifyFiles(operands[0], count, size)
	} else if err = writeFiles(operands[0], count, size, &done); err == nil && *fsyncPath != "" {
		err = fsyncFile(*fsyncPath)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fusecompare %s: %v\n", verb, err)
		return 1
	}
	return 0
}
