package mounters

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestProcessEnding: a running process is not ending; killed, it is (a zombie until reaped),
// and reaped too.
func TestProcessEnding(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	time.Sleep(50 * time.Millisecond)
	if processEnding(pid) {
		t.Fatalf("a running process (pid %d) is ending", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !processEnding(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("a killed process (pid %d, not reaped) is not ending after 5 s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Wait()
	if !processEnding(pid) {
		t.Fatalf("a reaped process (pid %d) is not ending", pid)
	}
}
