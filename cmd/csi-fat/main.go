// Command csi-fat is the one binary of csi-fat: the CSI driver and the tools that work on FAT
// volumes (mkfs, fsck, mount), as subcommands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

// command is one subcommand. run gets the arguments after the subcommand's name and returns the
// process exit code.
type command struct {
	name    string
	summary string
	run     func(args []string) int
	// hidden leaves it out of the usage: a command only the driver starts.
	hidden bool
}

var commands = map[string]*command{}

// register adds a subcommand; each subcommand's file calls it from init.
func register(c *command) { commands[c.name] = c }

func usage() {
	fmt.Fprintf(os.Stderr, "usage: csi-fat COMMAND [ARGS]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if c.hidden {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'csi-fat COMMAND --help' for a command's options.\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "csi-fat: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	os.Exit(c.run(os.Args[2:]))
}

// parseFlags parses a subcommand's flags. ok is false when the command must stop there, with
// code: 0 after --help, usageCode after a bad flag (the flag package has said why).
func parseFlags(fs *flag.FlagSet, args []string, usageCode int) (ok bool, code int) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, 0
		}
		return false, usageCode
	}
	return true, 0
}
