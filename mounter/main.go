package mounter

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/csi-fat/csi-fat/mounter/protocol"
	"golang.org/x/sys/unix"
)

// Main runs the mounter command with its arguments (those after "mounter") and returns the exit
// code. It is `csi-fat mounter`; test binaries that stand in for csi-fat call it too.
func Main(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("mounter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listenFD := fs.Int("listen-fd", protocol.ListenFD, "descriptor of the listening control socket (SOCK_SEQPACKET) handed over by the plugin; -1 to listen at --socket")
	socket := fs.String("socket", "", "listen for the plugin at this unix socket path instead of --listen-fd (a mounter pod's own socket)")
	closeFDs := fs.String("close-fds", "", "descriptors inherited from the plugin to close at once, comma-separated")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: csi-fat mounter [OPTIONS]\n\n"+
			"Serve one volume for the node plugin, which starts this command itself: the plugin opens the\n"+
			"volume's device and /dev/fuse, mounts, and hands both descriptors over the control socket.\n"+
			"Needs no privilege. Not meant to be run by hand.\n\noptions:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	// Started through /proc/self/fd/N, the process would be named "N".
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("csi-fat-mounter\x00")[0])), 0, 0, 0)
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("pid", os.Getpid())
	for _, f := range strings.Split(*closeFDs, ",") {
		if fd, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && fd > 2 {
			unix.Close(fd)
		}
	}
	var l *net.UnixListener
	var err error
	if *socket != "" {
		l, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: *socket, Net: "unixpacket"})
	} else {
		f := os.NewFile(uintptr(*listenFD), "control-socket")
		var nl net.Listener
		if nl, err = net.FileListener(f); err == nil {
			f.Close()
			var ok bool
			if l, ok = nl.(*net.UnixListener); !ok {
				err = fmt.Errorf("descriptor %d is not a unix socket", *listenFD)
			}
		}
	}
	if err != nil {
		log.Error("control socket", "error", err)
		return 1
	}
	l.SetUnlinkOnClose(false) // the plugin removes it once the mounter is gone
	log.Info("mounter started", "uid", os.Getuid(), "gid", os.Getgid(), "version", buildVersion())
	s := NewServer(log)
	if err := s.Serve(l); err != nil {
		log.Error("serving control requests", "error", err)
		return 1
	}
	log.Info("mounter done")
	return 0
}
