package driver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csi-fat/csi-fat/node/usbtest"
	"github.com/csi-fat/csi-fat/node/volume"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// buildCLI builds cmd/csi-fat into the test's temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "csi-fat")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/csi-fat").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// cliMount is a `csi-fat mount` serving a medium outside the driver.
type cliMount struct {
	cmd    *exec.Cmd
	dir    string
	stderr *bytes.Buffer
	exited chan error
}

// startCLIMount runs `csi-fat mount medium dir` and waits for the mount.
func startCLIMount(t *testing.T, bin, medium string) *cliMount {
	t.Helper()
	m := &cliMount{dir: t.TempDir(), stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
	m.cmd = exec.Command(bin, "mount", medium, m.dir)
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.exited <- m.cmd.Wait() }()
	t.Cleanup(func() {
		m.cmd.Process.Kill()
		detachUnder(t, filepath.Dir(m.dir))
	})
	for deadline := time.Now().Add(10 * time.Second); !fuseMounted(t, m.dir); {
		select {
		case err := <-m.exited:
			t.Fatalf("csi-fat mount exited: %v\n%s", err, m.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("csi-fat mount never mounted %s\n%s", m.dir, m.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m
}

func fuseMounted(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && fields[4] == dir && strings.Contains(sc.Text(), " - fuse") {
			return true
		}
	}
	return false
}

// stop unmounts and waits for a clean exit.
func (m *cliMount) stop(t *testing.T) {
	t.Helper()
	// Retried while busy: the kernel may hold the mount for a file closed a moment ago until
	// the server has answered its release.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("fusermount3", "-u", m.dir).CombinedOutput()
		if err == nil {
			break
		}
		if !strings.Contains(string(out), "busy") || time.Now().After(deadline) {
			t.Fatalf("fusermount3 -u %s: %v %s", m.dir, err, out)
		}
	}
	select {
	case err := <-m.exited:
		if err != nil {
			t.Fatalf("csi-fat mount: %v\n%s", err, m.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("csi-fat mount did not exit\n%s", m.stderr)
	}
}

func sha256Of(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// refusedStaging stages the volume read-write and read-only while another writer holds its
// medium: both FailedPrecondition naming the holder, nothing mounted, the medium unchanged.
func refusedStaging(t *testing.T, td *testDriver, id, medium, holder string) {
	t.Helper()
	before := sha256Of(t, medium)
	staging := filepath.Join(t.TempDir(), "staging")
	for _, c := range []*csi.VolumeCapability{rw, mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)} {
		_, err := td.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: c})
		if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), holder) {
			t.Errorf("staging %s (%v) held by another writer: %v; want FailedPrecondition naming %q", id, c.GetAccessMode().GetMode(), err, holder)
		}
		if fuseMounted(t, staging) {
			t.Errorf("staging %s (%v) mounted it", id, c.GetAccessMode().GetMode())
		}
	}
	if sha256Of(t, medium) != before {
		t.Fatalf("%s changed while staging was refused", medium)
	}
}

// TestStagingRefusesHeldImage: while `csi-fat mount` serves a volume's image, staging it is
// refused naming that process and nothing is written; once the mount is gone it stages with the
// mount's file in it, and while the driver serves it, csi-fat mount and mkfs are refused naming
// the driver's process.
func TestStagingRefusesHeldImage(t *testing.T) {
	requireFUSE(t)
	testenv.RequireTool(t, "fusermount3")
	bin := buildCLI(t)
	td := startDriver(t, "", nil)
	id := createVolume(t, td, "held", nil)
	img := filepath.Join(td.dir, "pool", "held.img")

	m := startCLIMount(t, bin, img)
	writeSynced(t, filepath.Join(m.dir, "cli.txt"), "written by csi-fat mount")
	refusedStaging(t, td, id, img, fmt.Sprintf("%s is in use by another writer (pid %d, csi-fat mount)", img, m.cmd.Process.Pid))
	m.stop(t)

	dir := t.TempDir()
	target := stageAndPublish(t, td, id, dir)
	if got, err := os.ReadFile(filepath.Join(target, "cli.txt")); err != nil || string(got) != "written by csi-fat mount" {
		t.Errorf("cli.txt after staging: %q, %v", got, err)
	}
	before := sha256Of(t, img)
	self := fmt.Sprintf("pid %d, %s", os.Getpid(), filepath.Base(os.Args[0]))
	for _, args := range [][]string{{"mount", img, t.TempDir()}, {"mkfs", img}, {"fsck", "-a", img}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		// With mounter processes (CSI_FAT_TEST_MOUNTER=process) the volume's mounter holds it
		// too, beside the driver's copy that outlives it.
		if err == nil || !strings.Contains(string(out), "is in use by another writer (") || !strings.Contains(string(out), self) {
			t.Errorf("csi-fat %v while the driver serves it: %v\n%s", args, err, out)
		}
	}
	if sha256Of(t, img) != before {
		t.Fatal("the served image changed while other writers were refused")
	}
	unpublishAndUnstage(t, td, id, dir)
	if clean, out := fsckClean(t, img); !clean {
		t.Errorf("fsck.fat -n after unstaging:\n%s", out)
	}
}

// TestUSBRefusesHeldStick: a stick that `csi-fat mount` serves is not formatted for a new
// volume (ResourceExhausted naming it in use), a volume on it is not staged
// (FailedPrecondition), and reclaim=wipe does not wipe it (FailedPrecondition); its bytes stay.
func TestUSBRefusesHeldStick(t *testing.T) {
	requireLoop(t)
	bin := buildCLI(t)
	fake := usbtest.New(t)
	stick := fake.Add(t, 32<<20, "Fake", "Held", "HELD0001")
	td := startDriver(t, "", withUSB(fake))
	vol, err := usbVolume(t, td, "stick", 1, map[string]string{volume.ParamFATType: "16", volume.ParamReclaim: volume.ReclaimWipe})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolumeId()

	m := startCLIMount(t, bin, stick.Loop)
	writeSynced(t, filepath.Join(m.dir, "cli.txt"), "written by csi-fat mount")
	holder := fmt.Sprintf("is in use (open for writing by pid %d, csi-fat mount)", m.cmd.Process.Pid)
	refusedStaging(t, td, id, stick.Loop, holder)

	before := sha256Of(t, stick.Loop)
	_, err = td.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: id})
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), holder) {
		t.Errorf("DeleteVolume with reclaim=wipe of a held stick: %v; want FailedPrecondition naming %q", err, holder)
	}
	if sha256Of(t, stick.Loop) != before {
		t.Fatal("the held stick was written")
	}
	m.stop(t)
	if _, err := td.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("DeleteVolume once the mount is gone: %v", err)
	}
	if out := run(t, "mdir", "-i", stick.Loop, "::/"); strings.Contains(out, "CLI") {
		t.Errorf("the stick was not wiped:\n%s", out)
	}

	m = startCLIMount(t, bin, stick.Loop)
	writeSynced(t, filepath.Join(m.dir, "cli.txt"), "written by csi-fat mount")
	holder = fmt.Sprintf("is in use (open for writing by pid %d, csi-fat mount)", m.cmd.Process.Pid)
	before = sha256Of(t, stick.Loop)
	for _, adopt := range []string{"false", "true"} {
		_, err = usbVolume(t, td, "again-"+adopt, 1, map[string]string{volume.ParamAdopt: adopt})
		if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), holder) {
			t.Errorf("CreateVolume (adopt %s) with the only stick held: %v; want ResourceExhausted naming %q", adopt, err, holder)
		}
	}
	if sha256Of(t, stick.Loop) != before {
		t.Fatal("the held stick was written")
	}
	m.stop(t)
}
