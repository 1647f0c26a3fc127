package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// serveLoopback mounts go-fuse's own loopback file system, which passes every request to a
// directory of the host's file system, on mnt, with the mount options and cache timeouts that
// csi-fat's mounts use, until SIGTERM or SIGINT. It is the benchmark's floor for a FUSE file
// system written with go-fuse: what the kernel's FUSE round trips and go-fuse cost, without a
// FAT engine behind them. FUSE passthrough is turned off: run as root, go-fuse's loopback would
// otherwise hand each open file to the kernel, which then reads and writes the host's file
// without asking the server, a shortcut no FAT file (clusters inside an image) can take.
func serveLoopback(dir, mnt string) error {
	root, err := fs.NewLoopbackRoot(dir)
	if err != nil {
		return fmt.Errorf("loopback of %s: %w", dir, err)
	}
	timeout := time.Second // fatfuse's cacheTimeout
	srv, err := fs.Mount(mnt, root, &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:               dir,
			Name:                 "loopback",
			MaxWrite:             fuse.MAX_KERNEL_WRITE,
			MaxReadAhead:         fuse.MAX_KERNEL_WRITE,
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
			Options:              []string{"default_permissions", "nosuid", "nodev"},
		},
	})
	if err != nil {
		return fmt.Errorf("mount loopback of %s on %s: %w", dir, mnt, err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		if err := srv.Unmount(); err != nil {
			fmt.Fprintf(os.Stderr, "fusecompare loopback: unmount %s: %v\n", mnt, err)
		}
	}()
	srv.Wait()
	return nil
}
