package mounters

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/csi-fat/csi-fat/mounter/protocol"
	"github.com/csi-fat/csi-fat/node/volume"
	"k8s.io/klog/v2"
)

// socketFor is where the mounter of the named volume listens: a hash keeps the path short
// (a unix socket's path has at most 107 bytes) and any name safe.
func (l *Launcher) socketFor(name string) (socket, logPath string, err error) {
	base := filepath.Join(l.stateDir, mountersDir, volumeHash(name))
	socket = base + ".sock"
	if len(socket) > unixPathMax {
		return "", "", fmt.Errorf("mounter socket path %s is longer than a unix socket path may be (%d bytes): use a shorter --state-dir", socket, unixPathMax)
	}
	return socket, base + ".log", nil
}

// spawn starts a mounter process for the volume: in a session of its own (the plugin's exit
// does not end it), as an unprivileged user with no capabilities, listening on a socket this
// process creates (the mounter may not create files in the state directory) and logging to a
// file this process opens.
func (l *Launcher) spawn(rec volume.Record, next bool) (*Mounter, error) {
	socket, logPath, err := l.socketFor(rec.Name)
	if err != nil {
		return nil, err
	}
	if next {
		// The mounter it replaces may still listen at the volume's socket (a hand-over) or have
		// left it behind: the new one gets a socket of its own, which its record names.
		socket = strings.TrimSuffix(socket, ".sock") + "-" + strconv.FormatInt(time.Now().UnixNano()%(1<<30), 36) + ".sock"
		if len(socket) > unixPathMax {
			return nil, fmt.Errorf("mounter socket path %s is longer than a unix socket path may be (%d bytes): use a shorter --state-dir", socket, unixPathMax)
		}
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return nil, err
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("mounter socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	lf, err := ln.File()
	ln.Close()
	if err != nil {
		os.Remove(socket)
		return nil, err
	}
	defer lf.Close()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		os.Remove(socket)
		return nil, err
	}
	defer logFile.Close()
	command, err := l.cfg.MounterCommand()
	if err != nil {
		os.Remove(socket)
		return nil, err
	}
	cmd, exe, err := l.cfg.UnprivilegedCommand(command, []*os.File{lf}, "--listen-fd="+strconv.Itoa(protocol.ListenFD))
	if err != nil {
		os.Remove(socket)
		return nil, err
	}
	defer exe.Close()
	cmd.Stderr = logFile
	cmd.SysProcAttr.Setsid = true
	if err := cmd.Start(); err != nil {
		os.Remove(socket)
		return nil, fmt.Errorf("start mounter: %w", err)
	}
	p := &Mounter{volume: rec.ID, socket: socket, logPath: logPath, pid: cmd.Process.Pid, cmd: cmd, gone: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		why := "exited"
		if err != nil {
			why = err.Error()
		}
		p.ended(fmt.Sprintf("the mounter (pid %d) %s; see %s", p.pid, why, logPath))
	}()
	if err := p.watch(); err != nil {
		p.Kill()
		return nil, err
	}
	p.watchExit()
	klog.InfoS("started mounter", "volume", rec.ID, "pid", p.pid, "socket", socket, "uid", cmd.SysProcAttr.Credential.Uid)
	return p, nil
}
