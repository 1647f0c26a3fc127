package blockdev

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/internal/mountinfo"
)

// Claim says how an opener shares its medium. Two writers on one FAT medium lose data silently
// (each caches the FAT and overwrites the other's), so every opener for writing claims the
// medium and a second one is refused:
//   - an image file gets an OFD write lock over the whole file (fcntl F_OFD_SETLK): advisory,
//     honoured by every csi-fat opener, released by the kernel when the holder's last
//     descriptor of that open file description closes, even if the holder is killed;
//   - a block device is opened O_EXCL, which the kernel enforces against other O_EXCL openers
//     (mkfs.fat, other csi-fat openers) and its own mounts, both ways.
//
// Both belong to the open file description, so the claim travels with its descriptor when
// that is passed to another process (see File.OSFile).
type Claim int

const (
	// Shared opens for reading only and claims nothing, so it works next to a writer, as
	// fsck.fat's check of a mounted device does; File.Writer names a writer found at open,
	// for a warning that what is read may be changing.
	Shared Claim = iota
	// Exclusive opens for reading and writing, holding the claim until Close.
	Exclusive
	// ExclusiveReadOnly holds the claim as Exclusive does but refuses writes: for a reader
	// that must not have a writer under it, such as a volume the driver serves read-only. An
	// image is still opened O_RDWR, since a write lock needs a descriptor open for writing.
	ExclusiveReadOnly
	// Beside opens for reading and writing without a claim of its own: for a writer whose side
	// already holds the medium's claim through another descriptor, such as the server of one
	// partition of a stick whose other partition's server holds the whole device O_EXCL (which
	// keeps the host's mounts off every partition). Each writes only inside its own window.
	Beside
)

func (c Claim) String() string {
	switch c {
	case Shared:
		return "shared"
	case Exclusive:
		return "exclusive"
	case ExclusiveReadOnly:
		return "exclusive read-only"
	case Beside:
		return "beside the claim of its own side"
	}
	return "claim(" + strconv.Itoa(int(c)) + ")"
}

// ErrInUse is what an *InUseError matches with errors.Is: the medium is held by another writer.
var ErrInUse = errors.New("in use by another writer")

// InUseError refuses a claim on a medium someone else holds.
type InUseError struct {
	Path   string
	Block  bool   // a block device (O_EXCL refused with EBUSY), else an image file (OFD lock)
	Holder string // who holds it, e.g. "pid 1234, csi-fat mount" or "mounted at /mnt"; "" if not found
	Claim  Claim  // the claim refused
	Err    error  // the errno: EBUSY for a device, EAGAIN for an image
}

func (e *InUseError) Error() string {
	what := "for writing"
	if e.Claim == ExclusiveReadOnly {
		what = "exclusively"
	}
	if e.Block {
		holder := e.Holder
		if holder == "" {
			holder = "mounted or claimed by another opener"
		}
		return fmt.Sprintf("%s is in use (%s): refusing to open it %s", e.Path, holder, what)
	}
	if e.Holder == "" {
		return fmt.Sprintf("%s is in use by another writer: refusing to open it %s", e.Path, what)
	}
	return fmt.Sprintf("%s is in use by another writer (%s): refusing to open it %s", e.Path, e.Holder, what)
}

func (e *InUseError) Unwrap() error { return e.Err }

func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// openClaimed opens path with the claim: O_EXCL for a block device, an OFD lock for an image.
func openClaimed(path string, isBlock bool, claim Claim) (*os.File, error) {
	flag := os.O_RDONLY
	switch {
	case claim == Exclusive, claim == Beside:
		flag = os.O_RDWR
	case claim == ExclusiveReadOnly && !isBlock:
		flag = os.O_RDWR
	}
	if isBlock && claim != Shared && claim != Beside {
		flag |= unix.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		if isBlock && errors.Is(err, unix.EBUSY) {
			return nil, &InUseError{Path: path, Block: true, Holder: deviceHolder(path), Claim: claim, Err: unix.EBUSY}
		}
		return nil, fmt.Errorf("blockdev %s: %w", path, err)
	}
	if !isBlock && claim != Shared && claim != Beside {
		if err := lockImage(f, path, claim); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// wholeFile is a lock over the whole file, however it grows; Pid must be 0 for OFD locks.
func wholeFile(typ int16) unix.Flock_t {
	return unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: 0, Len: 0}
}

// lockImage takes the OFD write lock on an open image, without waiting.
func lockImage(f *os.File, path string, claim Claim) error {
	lk := wholeFile(unix.F_WRLCK)
	var lerr error
	if err := controlFile(f, func(fd int) {
		for {
			if lerr = unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk); lerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return fmt.Errorf("blockdev %s: lock: %w", path, err)
	}
	if errors.Is(lerr, unix.EAGAIN) || errors.Is(lerr, unix.EACCES) {
		return &InUseError{Path: path, Holder: imageHolder(f), Claim: claim, Err: unix.EAGAIN}
	}
	if lerr != nil {
		return fmt.Errorf("blockdev %s: lock for writing: %w", path, lerr)
	}
	return nil
}

// otherWriter names a writer holding the medium f (opened Shared) has open, or "".
func otherWriter(f *os.File, path string, isBlock bool) string {
	if isBlock {
		// An O_EXCL open that is refused tells that someone holds the device; opened and closed
		// at once, and beside f, so closing it cannot be the device's last close.
		g, err := os.OpenFile(path, os.O_RDONLY|unix.O_EXCL, 0)
		if err == nil {
			g.Close()
			return ""
		}
		if !errors.Is(err, unix.EBUSY) {
			return ""
		}
		if h := deviceHolder(path); h != "" {
			return h
		}
		return "mounted or claimed by another opener"
	}
	lk := wholeFile(unix.F_RDLCK) // conflicts with write locks only
	var lerr error
	if err := controlFile(f, func(fd int) { lerr = unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk) }); err != nil || lerr != nil {
		return ""
	}
	if lk.Type == unix.F_UNLCK {
		return ""
	}
	if h := imageHolder(f); h != "" {
		return h
	}
	return "another writer"
}

func controlFile(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

// imageHolder names the processes holding a write lock on the image f has open. F_OFD_GETLK
// answers l_pid -1 for an OFD lock (it belongs to no process), so the holders are found in
// /proc/*/fdinfo, which lists the locks of each descriptor's open file description; a POSIX
// lock's owner is named by F_OFD_GETLK itself. "" when none can be seen (e.g. the holder is
// another user's process and we are not root).
func imageHolder(f *os.File) string {
	lk := wholeFile(unix.F_RDLCK)
	var lerr error
	if err := controlFile(f, func(fd int) { lerr = unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk) }); err == nil && lerr == nil && lk.Pid > 0 {
		return describePids([]int{int(lk.Pid)})
	}
	var st unix.Stat_t
	if err := controlFile(f, func(fd int) { lerr = unix.Fstat(fd, &st) }); err != nil || lerr != nil {
		return ""
	}
	ino := strconv.FormatUint(st.Ino, 10)
	return describePids(scanFDs(func(pid, fd string) bool {
		info, err := os.ReadFile(filepath.Join("/proc", pid, "fdinfo", fd))
		if err != nil || !hasOFDWriteLock(string(info), ino) {
			return false
		}
		// The lock line's device is the superblock's, which stat may not report (btrfs
		// subvolumes): confirm by the descriptor's own dev and inode.
		var fst unix.Stat_t
		return unix.Stat(filepath.Join("/proc", pid, "fd", fd), &fst) == nil && fst.Dev == st.Dev && fst.Ino == st.Ino
	}))
}

// hasOFDWriteLock tells whether an fdinfo file lists an OFD write lock on inode ino, in
// /proc/locks' format: "lock:\t1: OFDLCK ADVISORY  WRITE -1 08:02:1234 0 EOF".
func hasOFDWriteLock(fdinfo, ino string) bool {
	for _, line := range strings.Split(fdinfo, "\n") {
		rest, ok := strings.CutPrefix(line, "lock:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 6 || fields[1] != "OFDLCK" || fields[3] != "WRITE" {
			continue
		}
		if id := strings.Split(fields[5], ":"); len(id) == 3 && id[2] == ino {
			return true
		}
	}
	return false
}

// deviceHolder says who holds the block device at path: where the kernel mounts it or one of
// its partitions, what stacks on it (device-mapper, md), or which processes have it open for
// writing (an O_EXCL holder cannot be told from other openers: the kernel drops O_EXCL from the
// flags it shows). "" when none of these is found.
func deviceHolder(path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return ""
	}
	devs := map[string]bool{}
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	devs[fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))] = true
	if parts, _ := filepath.Glob(filepath.Join(sys, "*", "partition")); len(parts) > 0 {
		for _, p := range parts {
			if b, err := os.ReadFile(filepath.Join(filepath.Dir(p), "dev")); err == nil {
				devs[strings.TrimSpace(string(b))] = true
			}
		}
	}
	if at := mountedAt(devs); at != "" {
		return "mounted at " + at
	}
	if holders, _ := os.ReadDir(filepath.Join(sys, "holders")); len(holders) > 0 {
		return "held by " + holders[0].Name()
	}
	pids := scanFDs(func(pid, fd string) bool {
		link := filepath.Join("/proc", pid, "fd", fd)
		// Only device nodes are stat'ed: stat'ing a file on a hung FUSE mount would hang.
		if target, err := os.Readlink(link); err != nil || !strings.HasPrefix(target, "/dev/") {
			return false
		}
		var fst unix.Stat_t
		if unix.Stat(link, &fst) != nil || fst.Mode&unix.S_IFMT != unix.S_IFBLK || fst.Rdev != st.Rdev {
			return false
		}
		return openForWriting(pid, fd)
	})
	if len(pids) > 0 {
		return "open for writing by " + describePids(pids)
	}
	return ""
}

// mountedAt returns the first mount point of any of the devices ("major:minor"), or "".
func mountedAt(devs map[string]bool) string {
	mounts, _ := mountinfo.Read("/proc/self/mountinfo")
	for _, m := range mounts {
		if devs[m.Device] {
			return m.MountPoint
		}
	}
	return ""
}

// openForWriting reads a descriptor's access mode from its fdinfo flags (octal).
func openForWriting(pid, fd string) bool {
	info, err := os.ReadFile(filepath.Join("/proc", pid, "fdinfo", fd))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return err == nil && flags&unix.O_ACCMODE != unix.O_RDONLY
		}
	}
	return false
}

// scanFDs lists the processes with a descriptor that match accepts, each once. Processes we may
// not look into are skipped.
func scanFDs(match func(pid, fd string) bool) []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if match(p.Name(), fd.Name()) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// describePids names processes as "pid 1234, csi-fat mount"; "" for none.
func describePids(pids []int) string {
	var parts []string
	for _, pid := range pids {
		if name := processName(pid); name != "" {
			parts = append(parts, fmt.Sprintf("pid %d, %s", pid, name))
		} else {
			parts = append(parts, fmt.Sprintf("pid %d", pid))
		}
	}
	return strings.Join(parts, "; ")
}

var subcommand = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// processName is a process's program and, when it looks like one, its subcommand ("csi-fat
// mount"), from /proc/PID/cmdline; its comm when that is empty (a kernel thread).
func processName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err == nil && len(b) > 0 {
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		name := filepath.Base(args[0])
		if len(args) > 1 && subcommand.MatchString(args[1]) {
			name += " " + args[1]
		}
		return name
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}
