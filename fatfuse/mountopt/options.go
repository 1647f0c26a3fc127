package mountopt

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Options are the mount options, named and defaulted as Linux vfat's (see mount(8), "Mount
// options for fat" and "for vfat"). ParseOptions builds them from a -o string; DefaultOptions
// gives what an empty string means.
type Options struct {
	ReadOnly bool
	// UID and GID own every file, as FAT records no owner.
	UID, GID uint32
	// FMask and DMask are the permission bits cleared from files' and directories' 0777.
	FMask, DMask uint32
	// AllowUtime are the group/other write bits (0o020, 0o002) of callers who, besides the owner,
	// may set times.
	AllowUtime uint32
	ShortName  ondisk.ShortNameMode
	// CodePage is the OEM code page of short names (codepage=); nil is 437, vfat's default.
	CodePage *ondisk.CodePage
	// Flush writes a file back when it is closed; Sync writes back after every change.
	Flush, Sync bool
	// Quiet makes refused chmod and chown succeed without effect.
	Quiet bool
	// Errors is what to do when the volume reports an I/O error: "remount-ro" (the default)
	// refuses further changes, "continue" carries on.
	Errors string
	// AllowOther lets users other than the mounting one use the mount (FUSE's allow_other).
	AllowOther bool
	// Location is the time zone of FAT's local timestamps (tz=UTC, time_offset=); nil is local.
	Location *time.Location
	// Kernel are mount flags handed to the kernel as given (noexec, noatime, ...).
	Kernel []string
	// Debug logs every FUSE request.
	Debug bool
	// Check and Repair ask whoever opens the volume (csi-fat mount) to check it before serving,
	// as fsck.fat -n, or to repair what fsck.fat -a repairs safely, and to serve it only when
	// nothing but the dirty bit is left. Then a clean unmount may clear that bit
	// (fatvol.Options.Checked); without them a volume found dirty stays dirty, as on vfat.
	// The driver always checks and repairs before serving (its onDamage parameter).
	Check, Repair bool
}

// DefaultOptions are vfat's defaults: owned by the calling process's user and group, masks from
// its umask, read-write, shortname=mixed, errors=remount-ro.
func DefaultOptions() Options {
	mask := processUmask()
	return Options{
		UID:        uint32(os.Getuid()),
		GID:        uint32(os.Getgid()),
		FMask:      mask,
		DMask:      mask,
		AllowUtime: ^mask & 0o022,
		ShortName:  ondisk.ShortNameMixed,
		Errors:     "remount-ro",
	}
}

// processUmask reads the umask, which only setting it reveals; it is put back at once.
func processUmask() uint32 {
	m := unix.Umask(0)
	unix.Umask(m)
	return uint32(m) & 0o777
}

// kernelFlags are accepted and passed to the kernel, which applies them to the mount.
var kernelFlags = map[string]bool{
	"noexec": true, "exec": true, "noatime": true, "atime": true, "relatime": true,
	"norelatime": true, "strictatime": true, "nodiratime": true, "diratime": true,
	"lazytime": true, "nolazytime": true,
}

// ParseOptions reads a comma-separated option string as mount -o takes it. Unknown options and
// bad values are an error naming them.
func ParseOptions(s string) (Options, error) {
	o := DefaultOptions()
	allowUtimeSet := false
	var unknown []string
	for _, opt := range strings.Split(s, ",") {
		opt = strings.TrimSpace(opt)
		if opt == "" {
			continue
		}
		key, val, hasVal := strings.Cut(opt, "=")
		bad := func(err error) error { return fmt.Errorf("mount option %q: %w", opt, err) }
		needVal := func() error {
			if !hasVal || val == "" {
				return bad(fmt.Errorf("needs a value"))
			}
			return nil
		}
		switch {
		case key == "ro" && !hasVal:
			o.ReadOnly = true
		case key == "rw" && !hasVal:
			o.ReadOnly = false
		case key == "uid" || key == "gid":
			if err := needVal(); err != nil {
				return o, err
			}
			id, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return o, bad(err)
			}
			if key == "uid" {
				o.UID = uint32(id)
			} else {
				o.GID = uint32(id)
			}
		case key == "umask" || key == "dmask" || key == "fmask" || key == "allow_utime":
			if err := needVal(); err != nil {
				return o, err
			}
			m, err := strconv.ParseUint(val, 8, 32)
			if err != nil {
				return o, bad(err)
			}
			if m > 0o777 {
				return o, bad(fmt.Errorf("more than 0777"))
			}
			switch key {
			case "umask":
				o.FMask, o.DMask = uint32(m), uint32(m)
			case "dmask":
				o.DMask = uint32(m)
			case "fmask":
				o.FMask = uint32(m)
			case "allow_utime":
				o.AllowUtime, allowUtimeSet = uint32(m)&0o022, true
			}
		case key == "shortname":
			if err := needVal(); err != nil {
				return o, err
			}
			m, err := ondisk.ParseShortNameMode(val)
			if err != nil {
				return o, bad(err)
			}
			o.ShortName = m
		case key == "codepage":
			if err := needVal(); err != nil {
				return o, err
			}
			n, err := strconv.Atoi(val)
			if err != nil {
				return o, bad(fmt.Errorf("want a code page number"))
			}
			if o.CodePage, err = ondisk.LookupCodePage(n); err != nil {
				return o, bad(err)
			}
		case key == "errors":
			switch val {
			case "remount-ro", "continue":
				o.Errors = val
			case "panic":
				// The kernel's answer, halting the machine, is not a FUSE server's to give.
				return o, bad(fmt.Errorf("errors=panic is not supported by a userspace mount"))
			default:
				return o, bad(fmt.Errorf("want remount-ro or continue"))
			}
		case key == "tz":
			if val != "UTC" {
				return o, bad(fmt.Errorf("only tz=UTC is known"))
			}
			o.Location = time.UTC
		case key == "time_offset":
			if err := needVal(); err != nil {
				return o, err
			}
			minutes, err := strconv.Atoi(val)
			if err != nil || minutes < -24*60 || minutes > 24*60 {
				return o, bad(fmt.Errorf("want minutes within a day"))
			}
			o.Location = time.FixedZone(fmt.Sprintf("UTC%+d", minutes), minutes*60)
		case key == "iocharset" && val == "utf8", key == "utf8" && !hasVal:
			// Names are always UTF-8 here.
		case !hasVal && (key == "flush" || key == "sync" || key == "quiet" || key == "allow_other" || key == "debug" ||
			key == "check" || key == "repair"):
			switch key {
			case "check":
				o.Check = true
			case "repair":
				o.Repair = true
			case "flush":
				o.Flush = true
			case "sync":
				o.Sync = true
			case "quiet":
				o.Quiet = true
			case "allow_other":
				o.AllowOther = true
			case "debug":
				o.Debug = true
			}
		case !hasVal && (key == "nosuid" || key == "nodev"):
			// Always in force.
		case !hasVal && kernelFlags[key]:
			o.Kernel = append(o.Kernel, key)
		default:
			unknown = append(unknown, opt)
		}
	}
	if len(unknown) > 0 {
		return o, fmt.Errorf("unknown mount option(s): %s", strings.Join(unknown, ", "))
	}
	if o.Repair && o.ReadOnly {
		return o, fmt.Errorf("mount options repair and ro exclude each other: repair writes to the volume (check does not)")
	}
	if !allowUtimeSet {
		// vfat: by default whoever may write the directory per dmask may set times.
		o.AllowUtime = ^o.DMask & 0o022
	}
	return o, nil
}

// OptionsHelp documents every option, for the command's --help.
const OptionsHelp = `  ro, rw              read-only or read-write (default rw)
  uid=N, gid=N        owner and group of every file (default: the mounting process's)
  umask=OOO           octal permission bits to clear, files and directories (default: process umask)
  dmask=OOO           ... directories only
  fmask=OOO           ... files only
  allow_utime=OOO     octal 020 and/or 002: group/others with write access may set times
  shortname=MODE      lower, win95, winnt or mixed (default mixed): how short names are made and shown
  codepage=N          the OEM code page short names are made and read in (default 437): 437, 850
                      (Windows in Western Europe, and mtools), 852, 855, 860, 862, 863, 865, 866
  flush               write a file back to the device when it is closed
  sync                write every change back to the device before the call returns
  quiet               refused chmod/chown succeed silently instead of failing with EPERM
  errors=MODE         remount-ro (default: refuse changes after an I/O error) or continue
  tz=UTC              FAT timestamps are UTC instead of local time
  time_offset=MIN     FAT timestamps are at this offset from UTC, in minutes
  utf8, iocharset=utf8  accepted: names are always UTF-8
  allow_other         let other users use the mount
  noexec, exec, noatime, atime, relatime, norelatime, strictatime, nodiratime, diratime,
  lazytime, nolazytime  passed to the kernel
  nosuid, nodev       accepted; always in force
  debug               log every FUSE request
  check               before serving, check the file system as fsck.fat -n does and refuse to mount
                      if it finds more than the dirty bit; a clean unmount then clears that bit
  repair              before serving, repair what fsck.fat -a repairs safely (lost clusters, the free
                      count, the dirty bit, FAT copies, sizes out of step with chains) and refuse to
                      mount if anything else is wrong. Without check or repair, a volume that was not
                      cleanly unmounted is served with a warning and stays marked dirty, as on vfat
`
