// Command servemem measures what serving a volume of many small files costs: it creates them
// through `csi-fat mount -memory-limit` (a mounter pod's figures) and through ext4 on a loop
// device on the same disk, then walks, stats and reads every one through a fresh mount of each,
// and prints the rates, the CPU seconds (the walker's and the server's), the server's peak
// resident memory after each phase, and the check's peak (`csi-fat fsck -n`) against fsck.fat -n
// on the same volume. Run as root (the loop mount).
//
//	go run ./bench/servemem -csi-fat BIN [-files 300000] [-per-dir 300] [-memory-limit 224M]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/csi-fat/csi-fat/bench/internal/gnutime"
)

func main() {
	bin := flag.String("csi-fat", "", "the csi-fat binary to measure")
	files := flag.Int("files", 300000, "files on the volume")
	perDir := flag.Int("per-dir", 300, "files per directory")
	limit := flag.String("memory-limit", "224M", "csi-fat mount -memory-limit: the chart's default pod limit (160Mi overhead, 64Mi cache)")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "usage: servemem -csi-fat BIN [-files N] [-per-dir N] [-memory-limit SIZE]")
		os.Exit(2)
	}
	if err := run(*bin, *files, *perDir, *limit); err != nil {
		fmt.Fprintln(os.Stderr, "servemem:", err)
		os.Exit(1)
	}
}

// phase is what one contender's create or walk took.
type phase struct {
	wall               time.Duration
	walkerCPU, srvCPU  time.Duration
	srvPeak            int64 // bytes; 0 for ext4
	files              int
	contender, workDir string
}

func run(bin string, files, perDir int, limit string) error {
	dir, err := os.MkdirTemp("", "servemem")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// 4 KiB clusters (blocks for ext4), a cluster a file, room for a tenth more.
	size := int64(files)*4096*11/10 + 256<<20
	fatImg, extImg := filepath.Join(dir, "fat.img"), filepath.Join(dir, "ext4.img")
	if err := sh("mkfs.fat", "-F", "32", "-s", "8", "-C", fatImg, strconv.FormatInt(size>>10, 10)); err != nil {
		return err
	}
	if err := sh("truncate", "-s", strconv.FormatInt(size, 10), extImg); err != nil {
		return err
	}
	if err := sh("mkfs.ext4", "-q", "-F", "-N", strconv.Itoa(files+files/10+1000), extImg); err != nil {
		return err
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}

	var rows []phase
	for _, walk := range []bool{false, true} {
		// csi-fat mount, a fresh server for each phase.
		srv, err := startServer(bin, limit, fatImg, mnt)
		if err != nil {
			return err
		}
		p, err := timed(func() error { return workload(mnt, files, perDir, walk) })
		p.contender, p.files = "csi-fat mount", files
		p.srvPeak, p.srvCPU = srv.peak(), srv.cpu()
		if serr := srv.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("csi-fat mount: %w", err)
		}
		rows = append(rows, p)

		// ext4 on a loop device of the same disk. Neither drops the page cache (the machine's,
		// shared): each walks what it has just written, the image file's pages warm for both.
		if err := sh("mount", "-o", "loop", extImg, mnt); err != nil {
			return err
		}
		p, err = timed(func() error { return workload(mnt, files, perDir, walk) })
		p.contender, p.files = "ext4 (loop)", files
		if uerr := sh("umount", mnt); err == nil {
			err = uerr
		}
		if err != nil {
			return fmt.Errorf("ext4: %w", err)
		}
		rows = append(rows, p)
	}

	fmt.Printf("| %d files, %d a directory | wall | files/s | walker CPU | server CPU | server peak RSS |\n|---|---|---|---|---|---|\n", files, perDir)
	for i, r := range rows {
		what := "create"
		if i >= 2 {
			what = "fresh mount, walk, stat, read"
		}
		peak := "-"
		if r.srvPeak > 0 {
			peak = fmt.Sprintf("%.1f MiB", float64(r.srvPeak)/(1<<20))
		}
		fmt.Printf("| %s: %s | %.1f s | %.0f | %.1f s | %.1f s | %s |\n", what, r.contender, r.wall.Seconds(), float64(r.files)/r.wall.Seconds(), r.walkerCPU.Seconds(), r.srvCPU.Seconds(), peak)
	}
	fmt.Printf("rates against ext4: create %.2fx, walk %.2fx\n", rows[1].wall.Seconds()/rows[0].wall.Seconds(), rows[3].wall.Seconds()/rows[2].wall.Seconds())

	// The check of the same volume, each checker under GNU time.
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"csi-fat fsck -n", []string{bin, "fsck", "-n", fatImg}},
		{"fsck.fat -n", []string{"fsck.fat", "-n", fatImg}},
	} {
		rss, wall, cpu, err := gnutime.Measure(c.argv)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		fmt.Printf("check: %s: peak RSS %.1f MiB, %.2f s (CPU %.2f s)\n", c.name, float64(rss)/1024, wall.Seconds(), cpu.Seconds())
	}
	return nil
}

// workload creates the files (walk false) or walks, stats and reads them all (walk true), one
// directory after another, as a single program would.
func workload(root string, files, perDir int, walk bool) error {
	data := bytes.Repeat([]byte("0123456789"), 20)
	for d := 0; d*perDir < files; d++ {
		dir := filepath.Join(root, fmt.Sprintf("DCIM-%04d", d))
		if !walk {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			for i := d * perDir; i < min(files, (d+1)*perDir); i++ {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("photo with a long name %07d.jpg", i)), data, 0o644); err != nil {
					return err
				}
			}
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if _, err := os.Lstat(p); err != nil {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if !bytes.Equal(b, data) {
				return fmt.Errorf("%s holds %d bytes, not what was written", p, len(b))
			}
		}
	}
	return nil
}

// timed runs f and returns its wall time and this process's CPU time in it.
func timed(f func() error) (phase, error) {
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	err := f()
	p := phase{wall: time.Since(start)}
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	p.walkerCPU = time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	return p, err
}

type server struct {
	cmd    *exec.Cmd
	mnt    string
	stderr bytes.Buffer
	exited chan error
}

func startServer(bin, limit, img, mnt string) (*server, error) {
	s := &server{mnt: mnt, exited: make(chan error, 1)}
	s.cmd = exec.Command(bin, "mount", "-memory-limit", limit, img, mnt)
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.exited <- s.cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(" "+mnt+" ")) {
			return s, nil
		}
		select {
		case err := <-s.exited:
			return nil, fmt.Errorf("csi-fat mount exited: %v\n%s", err, s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			s.cmd.Process.Kill()
			return nil, fmt.Errorf("%s never mounted\n%s", mnt, s.stderr.String())
		}
	}
}

// peak is the server's peak resident memory (VmHWM: a fresh count from its exec).
func (s *server) peak() int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			return kib << 10
		}
	}
	return 0
}

// cpu is the server's CPU time so far (utime and stime of /proc/PID/stat, in clock ticks of
// 1/100 s).
func (s *server) cpu() time.Duration {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// stop unmounts with SIGTERM and waits for a clean exit (everything written back).
func (s *server) stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			return fmt.Errorf("%v\n%s", err, s.stderr.String())
		}
		return nil
	case <-time.After(5 * time.Minute):
		s.cmd.Process.Kill()
		return fmt.Errorf("did not exit\n%s", s.stderr.String())
	}
}

func sh(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
