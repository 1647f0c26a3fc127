// Command pause is the sandbox process of every pod on the local e2e cluster (image
// registry.k8s.io/pause:3.10, built by test/e2e/cluster/build.sh): it holds the pod's namespaces,
// reaps the orphans the kernel hands to the namespace's PID 1, and exits when the runtime stops the pod.
package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		reapChildren()
	}
}

// reapChildren waits for every child that has exited; SIGCHLDs coalesce, so one signal may stand for many.
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
