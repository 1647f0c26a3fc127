package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatfuse"
	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/mounter"
)

func init() {
	register(&command{name: "mount", summary: "serve a FAT image or device through FUSE until unmounted", run: runMount})
}

// mountOptionList collects -o values; mount(8) allows the flag more than once.
type mountOptionList []string

func (l *mountOptionList) String() string     { return strings.Join(*l, ",") }
func (l *mountOptionList) Set(s string) error { *l = append(*l, s); return nil }

func newMountFlagSet(out io.Writer) (*flag.FlagSet, *mountOptionList, *string) {
	var opts mountOptionList
	fs := flag.NewFlagSet("mount", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Var(&opts, "o", "comma-separated mount options, as for Linux vfat (below); may be repeated")
	memory := fs.String("memory-limit", "", "hold the server to this many bytes (K, M, G suffixes) as a mounter pod with this memory limit:\n"+
		"the Go runtime's limit, the files the server keeps known and the directories the engine keeps follow from it")
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: csi-fat mount [-o OPTIONS] [-memory-limit SIZE] IMAGE|DEVICE MOUNTPOINT\n\n"+
			"Serve the FAT file system on IMAGE or DEVICE at MOUNTPOINT through FUSE, in the foreground,\n"+
			"until it is unmounted (fusermount3 -u MOUNTPOINT, umount MOUNTPOINT) or the process gets\n"+
			"SIGINT or SIGTERM. Then everything is written back, the volume is marked clean, and the\n"+
			"exit status is 0. A volume that was not cleanly unmounted before is served with a warning\n"+
			"and stays marked dirty for fsck, unless -o check or -o repair found it whole at the mount.\n"+
			"-o may also follow the operands.\n\n"+
			"A partitioned IMAGE or DEVICE (an MBR or GPT partition table, as on SD cards and most sticks)\n"+
			"serves its first FAT partition (MBR types 0x01, 0x04, 0x06, 0x0b, 0x0c, 0x0e and their hidden\n"+
			"variants, GPT basic data and EFI system partitions holding a FAT boot sector), or the one\n"+
			"-o partition=N names (its number, as in sdb1, or a GPT partition's unique GUID), never reading\n"+
			"or writing outside it. A FAT file system on the whole medium (a superfloppy) is served whole.\n"+
			"\noptions:\n")
		fs.PrintDefaults()
		fmt.Fprintf(out, "\nmount options (-o):\n%s", mountopt.OptionsHelp)
		fmt.Fprintf(out, "  partition=N|GUID  serve partition N (or the GPT partition with this unique GUID) of a\n"+
			"                    partitioned IMAGE or DEVICE; default: its first FAT partition\n")
	}
	return fs, &opts, memory
}

// parseMountArgs takes flags before, between and after the two operands, as mount(8) does.
func parseMountArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return operands, nil
		}
		operands = append(operands, args[0])
		args = args[1:]
	}
}

func runMount(args []string) int {
	fs, optList, memory := newMountFlagSet(os.Stderr)
	operands, err := parseMountArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if len(operands) != 2 {
		fmt.Fprintf(os.Stderr, "csi-fat mount: want IMAGE|DEVICE and MOUNTPOINT, got %d operand(s)\n", len(operands))
		fs.Usage()
		return 2
	}
	optString, partition, err := partitionOption(optList.String())
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat mount: %v\n", err)
		return 2
	}
	opts, err := mountopt.ParseOptions(optString)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat mount: %v\n", err)
		return 2
	}
	var bound int64
	if *memory != "" {
		if bound, err = parseSize(*memory); err != nil {
			fmt.Fprintf(os.Stderr, "csi-fat mount: -memory-limit: %v\n", err)
			return 2
		}
	}
	return serveMount(operands[0], operands[1], partition, opts, bound)
}

// serveMount opens, mounts and serves until the mount is gone, then closes the volume.
// bound, when not 0, holds the process to that memory as a mounter is held (mounter.HoldServing).
func serveMount(image, mountpoint, partition string, opts mountopt.Options, bound int64) int {
	// Catch the signals before the mount exists: from then on SIGTERM must unmount, not kill.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	// Before the volume is opened (and marked dirty): fusermount3 would say no more than its code.
	if err := fatfuse.CheckMountpoint(mountpoint); err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat mount: %v\n", err)
		return 1
	}
	vopts := fatfuse.VolumeOptions(opts)
	vopts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cache := vopts.CacheBytes
	if cache <= 0 {
		cache = fatvol.DefaultCacheBytes
	}
	nodes, dirCache := mounter.HoldServing(bound, cache)
	vopts.DirCacheBytes = dirCache
	vol, err := openForMount(image, partition, opts, vopts, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat mount: %v\n", err)
		return 1
	}
	warnWriter(os.Stderr, "mount", image, volumeWriter(vol), "serving it")
	fatfuse.SoleVolumeGC() // this process serves this volume alone
	srv, err := fatfuse.Mount(vol, mountpoint, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat mount: %v\n", err)
		if cerr := vol.Close(); cerr != nil {
			fmt.Fprintf(os.Stderr, "csi-fat mount: %v\n", cerr)
			return 1
		}
		if errors.Is(err, fatfuse.ErrUnmountedBeforeServing) {
			return 0 // unmounted as asked, the volume as it was
		}
		return 1
	}
	if nodes > 0 {
		srv.SetNodeBudget(nodes)
	}
	fmt.Fprintf(os.Stderr, "csi-fat mount: %s mounted on %s\n", image, mountpoint)

	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "csi-fat mount: %v: unmounting %s\n", sig, mountpoint)
		unmountForShutdown(srv, mountpoint, done)
	}
	<-done
	if err := vol.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat mount: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "csi-fat mount: %s written back and unmounted\n", image)
	return 0
}

// unmountForShutdown unmounts; while the mount is busy it detaches it (lazy unmount), so that the
// kernel stops sending requests once the last user lets go and the server can finish.
func unmountForShutdown(srv *fatfuse.Server, mountpoint string, done <-chan struct{}) {
	err := srv.Unmount()
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "csi-fat mount: %v; detaching instead\n", err)
	if err := unix.Unmount(mountpoint, unix.MNT_DETACH); err != nil {
		// Not root: the setuid helper may detach it for us.
		if out, ferr := exec.Command("fusermount3", "-u", "-z", mountpoint).CombinedOutput(); ferr != nil {
			fmt.Fprintf(os.Stderr, "csi-fat mount: detach %s: %v; fusermount3: %v %s\n", mountpoint, err, ferr, out)
		}
	}
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}
