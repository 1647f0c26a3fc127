package fatfuse

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
)

// The takeover tests run each server in a process of its own, the test binary started again
// with childRole set: the test process is the holder (it mounts /dev/fuse itself and keeps the
// descriptor and the state memfd) and the application.
const (
	childRole       = "FATFUSE_TEST_SERVER" // "serve" or "takeover"
	childImage      = "FATFUSE_TEST_IMAGE"
	childMountpoint = "FATFUSE_TEST_MOUNTPOINT"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childRole); role != "" {
		os.Exit(serverChild(role))
	}
	os.Exit(m.Run())
}

// resentWait is how long a server that took over waits before it says how many requests the
// kernel sent it again: those come at once.
const resentWait = 300 * time.Millisecond

// serverChild serves the connection on descriptor 3 with the state on 4 and the image, claimed
// by the holder, on 5 (so that a server killed while a thread of it waits in the kernel on the
// connection does not keep the next one from the image), says "ready <µs>" on
// its standard output (the time TakeOver or ServeConnection took) and, after a takeover,
// "resent <n>" a moment later; it pauses at SIGTERM and then says "paused" and ends without
// closing the volume, which is the next server's.
func serverChild(role string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	img, mountpoint := os.Getenv(childImage), os.Getenv(childMountpoint)
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "server: %v\n", err)
		return 1
	}
	opts, err := mountopt.ParseOptions("")
	if err != nil {
		return fail(err)
	}
	dev, err := blockdev.FromFile(os.NewFile(5, img), img, blockdev.Exclusive)
	if err != nil {
		return fail(err)
	}
	if role == "takeover" {
		// As a mounter does before serving: the open-time check and repair.
		if _, err := fsck.Repair(dev); err != nil {
			return fail(err)
		}
	}
	vol, err := fatvol.Open(dev, VolumeOptions(opts))
	if err != nil {
		return fail(err)
	}
	c := Connection{FD: 3, Mountpoint: mountpoint, State: os.NewFile(4, "state")}
	start := time.Now()
	var srv *Server
	if role == "takeover" {
		srv, err = TakeOver(vol, c, opts)
	} else {
		srv, err = ServeConnection(vol, c, opts)
	}
	if err != nil {
		return fail(err)
	}
	fmt.Printf("ready %d\n", time.Since(start).Microseconds())
	if role == "takeover" {
		time.Sleep(resentWait)
		fmt.Printf("resent %d\n", srv.Resent())
	}
	var pausing atomic.Bool
	paused := make(chan error, 1)
	go func() {
		<-term
		pausing.Store(true)
		paused <- srv.Pause()
	}()
	srv.Wait()
	if pausing.Load() {
		if err := <-paused; err != nil {
			return fail(err)
		}
		fmt.Println("paused")
		return 0
	}
	if err := vol.Close(); err != nil {
		return fail(err)
	}
	return 0
}

// holder mounts a FUSE connection for a test and keeps it, with its state file, while servers
// come and go.
type holder struct {
	t     *testing.T
	img   string
	dir   string
	fuse  *os.File
	state *os.File
	dev   *blockdev.File // the image, claimed by the holder as the node plugin claims devices
	srv   *exec.Cmd
	out   *bufio.Reader
	// readyAt is when the last server started said it serves.
	readyAt time.Time
}

// hold mounts /dev/fuse at a new directory as the node plugin does, and makes the state memfd.
func hold(t *testing.T, img string) *holder {
	t.Helper()
	h := &holder{t: t, img: img, dir: t.TempDir()}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.fuse = f
	data := strings.Join([]string{"fd=" + strconv.Itoa(int(f.Fd())), "rootmode=40000", "user_id=0", "group_id=0",
		"max_read=1048576", "default_permissions", "allow_other"}, ",")
	if err := unix.Mount(img, h.dir, "fuse.fat", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		f.Close()
		t.Fatalf("mount fuse at %s: %v", h.dir, err)
	}
	conn := connectionOf(t, h.dir)
	if h.dev, err = blockdev.Open(img, false); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.MemfdCreate("fatfuse-state", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	h.state = os.NewFile(uintptr(fd), "fatfuse-state")
	t.Cleanup(func() {
		// A test that failed with no server, or one that left requests a dead server had read,
		// would leave the application's requests waiting for ever, and this process with them:
		// the connection is aborted, but only while it is still mounted here. After an unmount
		// its number is free, and may name another test's mount by now (tests of other
		// packages run beside these).
		if c, ok := mountedConnection(h.dir); ok && c == conn {
			os.WriteFile(conn+"/abort", []byte("1"), 0)
		}
		unix.Unmount(h.dir, unix.MNT_DETACH)
		if h.srv != nil {
			h.srv.Process.Kill()
			h.srv.Wait()
		}
		h.fuse.Close()
		h.state.Close()
		h.dev.Close()
	})
	return h
}

// connectionOf names the FUSE connection mounted at dir in /sys/fs/fuse/connections: its
// number is the mount's device minor, read from the mount table (a stat would wait for a server).
func connectionOf(t *testing.T, dir string) string {
	t.Helper()
	c, ok := mountedConnection(dir)
	if !ok {
		t.Fatalf("%s is not in the mount table", dir)
	}
	return c
}

// mountedConnection is connectionOf without a test: false when dir is not mounted.
func mountedConnection(dir string) (string, bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			if _, minor, ok := strings.Cut(f[2], ":"); ok {
				return "/sys/fs/fuse/connections/" + minor, true
			}
		}
	}
	return "", false
}

// start runs a server process in role and waits until it serves; it returns how long the
// server took to start serving after its volume was open and, after a takeover, how many
// requests the kernel sent it again.
func (h *holder) start(role string) (took time.Duration, resent uint64) {
	h.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childRole+"="+role, childImage+"="+h.img, childMountpoint+"="+h.dir)
	cmd.ExtraFiles = []*os.File{h.fuse, h.state, h.dev.OSFile()}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.srv, h.out = cmd, bufio.NewReader(out)
	line, err := h.out.ReadString('\n')
	var us int64
	if _, serr := fmt.Sscanf(line, "ready %d", &us); err != nil || serr != nil {
		h.t.Fatalf("server %s did not start: %q, %v", role, line, err)
	}
	h.readyAt = time.Now()
	if role == "takeover" {
		line, err = h.out.ReadString('\n')
		if _, serr := fmt.Sscanf(line, "resent %d", &resent); err != nil || serr != nil {
			h.t.Fatalf("server %s: %q, %v", role, line, err)
		}
	}
	return time.Duration(us) * time.Microsecond, resent
}

// kill ends the server with SIGKILL, and does not wait for its end: a thread of it may wait in
// the kernel on the connection (dropping pages a read in flight holds), which the next server's
// answers release.
func (h *holder) kill() {
	h.t.Helper()
	h.srv.Process.Kill()
	go h.srv.Wait()
	h.srv = nil
}

// pause has the server hand over (SIGTERM: Pause) and waits for it to end.
func (h *holder) pause() {
	h.t.Helper()
	h.srv.Process.Signal(syscall.SIGTERM)
	line, _ := h.out.ReadString('\n')
	if err := h.srv.Wait(); err != nil || line != "paused\n" {
		h.t.Fatalf("server did not pause: %q, %v", line, err)
	}
	h.srv = nil
}

// unmount unmounts, lets the server close the volume and waits for it to end.
func (h *holder) unmount() {
	h.t.Helper()
	if err := unix.Unmount(h.dir, 0); err != nil {
		h.t.Fatalf("unmount %s: %v", h.dir, err)
	}
	done := make(chan error, 1)
	go func() { done <- h.srv.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			h.t.Errorf("server: %v", err)
		}
	case <-time.After(20 * time.Second):
		h.t.Errorf("server did not end after unmount")
	}
	h.srv = nil
}
