package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/driver"
	"github.com/csi-fat/csi-fat/node"
	"github.com/csi-fat/csi-fat/node/inprocess"
	"github.com/csi-fat/csi-fat/node/media"
	"github.com/csi-fat/csi-fat/node/mounters"
)

func init() {
	register(&command{name: "driver", summary: "run the CSI plugin (identity, controller and node services)", run: runDriver})
}

// listFlag collects a repeatable flag's values; commas separate values too.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// sizeFlag is a byte count with an optional K, M, G or T suffix; 0 is allowed.
type sizeFlag int64

func (s *sizeFlag) String() string {
	n := int64(*s)
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.suffix)
		}
	}
	return fmt.Sprint(n)
}
func (s *sizeFlag) Set(v string) error {
	if v == "0" {
		*s = 0
		return nil
	}
	n, err := parseSize(v)
	*s = sizeFlag(n)
	return err
}

// driverFlags are the driver command's options.
type driverFlags struct {
	endpoint, nodeID, driverName, poolDir, stateDir, metricsAddress string
	healthAddress, registrationDir, registrationPath                string
	reserve                                                         sizeFlag
	maxVolumes                                                      int
	usb                                                             bool
	usbCfg                                                          media.Config
	allowVendor, denyVendor, allowModel, denyModel                  listFlag
	allowSerial, denySerial, allowByID, denyByID                    listFlag
	allowByPath, denyByPath, includeByID, includeByPath             listFlag
	mounter, mounterUser                                            string
	mounterUpgrade                                                  bool
	pods                                                            podFlags
	discovery                                                       discoveryFlags
}

func defaultNodeID() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return h
}

func newDriverFlagSet(out io.Writer) (*flag.FlagSet, *driverFlags) {
	f := &driverFlags{reserve: 1 << 30, usbCfg: media.DefaultConfig()}
	fs := flag.NewFlagSet("driver", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.endpoint, "endpoint", "unix:///csi/csi.sock", "gRPC endpoint to serve CSI on: unix:///path/to/socket")
	fs.StringVar(&f.nodeID, "node-id", defaultNodeID(), "this node's ID, the Kubernetes node name (default: $NODE_NAME, else the host name)")
	fs.StringVar(&f.driverName, "driver-name", driver.DefaultDriverName, "CSI driver name; the topology key is this name followed by /node")
	fs.StringVar(&f.poolDir, "pool-dir", "/var/lib/csi-fat/pool", "image pool: the directory on a node-local disk where volumes are kept as image files")
	fs.StringVar(&f.stateDir, "state-dir", "/var/lib/csi-fat/state", "where node-local state (volumes, what is staged and published) is kept across restarts")
	fs.Var(&f.reserve, "reserve", "bytes of the image pool's file system never given to volumes (K, M, G, T suffixes)")
	fs.IntVar(&f.maxVolumes, "max-volumes", 64, "most volumes on this node, reported to the scheduler (0: no limit)")
	fs.StringVar(&f.metricsAddress, "metrics-address", "", "host:port to serve Prometheus metrics on at /metrics (default: none)")
	fs.StringVar(&f.healthAddress, "health-address", "", "host:port to answer a liveness probe on at /healthz: 200 when the driver is ready, 503 and the reason when not (default: none; may equal --metrics-address)")
	fs.StringVar(&f.registrationDir, "kubelet-registration-dir", "", "register with the kubelet through its plugin watcher in this directory, e.g. /var/lib/kubelet/plugins_registry, instead of the node-driver-registrar sidecar (default: off)")
	fs.StringVar(&f.registrationPath, "kubelet-registration-path", "", "the CSI socket's path as the kubelet sees it (default: /var/lib/kubelet/plugins/<driver-name>/csi.sock)")
	fs.StringVar(&f.mounter, "mounter", "auto", "where volumes are served: \"pod\" (a mounter pod per volume, unprivileged, made through the API; it outlives the driver's pod), \"process\" (a mounter process per volume, unprivileged, which outlives a restart of the driver), \"inprocess\" (in the driver's process: a restart kills the mounts), or \"auto\": in a Kubernetes pod, pod when --mounter-image is set and else inprocess (a child process would die with the container); elsewhere process")
	fs.StringVar(&f.mounterUser, "mounter-user", "65534:65534", "UID:GID the mounters run as (numeric); they need no privilege")
	fs.BoolVar(&f.mounterUpgrade, "mounter-upgrade", true, "replace each running mounter of another version than this driver's by a new one, one volume at a time, by a hand-over of its live FUSE connection (applications pause, see no error); false leaves old mounters serving until their volume is unstaged")
	f.pods.register(fs)
	fs.BoolVar(&f.usb, "media-pool", false, "enable the removable-media pool: USB disks, SD/MMC cards and devices an include pattern names, formatted or adopted by volumes of pool \"media\" (or \"usb\")")
	fs.StringVar(&f.usbCfg.SysfsRoot, "media-sysfs-root", f.usbCfg.SysfsRoot, "sysfs root to find block devices under (<root>/block/*)")
	fs.StringVar(&f.usbCfg.DeviceGlob, "media-device-glob", f.usbCfg.DeviceGlob, "which block device names are candidates: comma-separated globs (sd* for USB sticks, mmcblk* for SD/MMC cards)")
	fs.StringVar(&f.usbCfg.DevDir, "media-dev-dir", f.usbCfg.DevDir, "directory of the device nodes")
	fs.StringVar(&f.usbCfg.ByIDDir, "media-by-id-dir", f.usbCfg.ByIDDir, "directory of stable device names, which identify devices across re-plugging")
	fs.StringVar(&f.usbCfg.ByPathDir, "media-by-path-dir", f.usbCfg.ByPathDir, "directory of device names by port (by-path), which the byPath parameter and the by-path patterns match")
	fs.StringVar(&f.usbCfg.MountInfo, "media-mount-info", f.usbCfg.MountInfo, "the host's mount table: devices mounted there (or with a partition mounted) are busy and never claimed; in a container, /proc/1/mountinfo with the host's PID namespace (hostPID), since the container's own table does not show the host's mounts")
	fs.Var(&f.allowVendor, "media-allow-vendor", "only use devices whose vendor matches this shell pattern (repeatable)")
	fs.Var(&f.denyVendor, "media-deny-vendor", "never use devices whose vendor matches this shell pattern (repeatable)")
	fs.Var(&f.allowModel, "media-allow-model", "only use devices whose model matches (repeatable)")
	fs.Var(&f.denyModel, "media-deny-model", "never use devices whose model matches (repeatable)")
	fs.Var(&f.allowSerial, "media-allow-serial", "only use devices whose serial number matches (repeatable)")
	fs.Var(&f.denySerial, "media-deny-serial", "never use devices whose serial number matches (repeatable)")
	fs.Var(&f.allowByID, "media-allow-by-id", "only use devices with a by-id name matching this glob, e.g. 'usb-SanDisk_*' (repeatable)")
	fs.Var(&f.denyByID, "media-deny-by-id", "never use devices with a by-id name matching this glob (repeatable)")
	fs.Var(&f.allowByPath, "media-allow-by-path", "only use devices with a by-path name matching this glob, e.g. 'pci-0000:00:14.0-usb-0:2:*' (repeatable)")
	fs.Var(&f.denyByPath, "media-deny-by-path", "never use devices with a by-path name matching this glob (repeatable)")
	fs.Var(&f.includeByID, "media-include-by-id", "make any whole block device with a by-id name matching this glob a member of the pool, removable or not, on any bus, e.g. 'ata-Card_Reader_*' (repeatable; the allow and deny lists still apply)")
	fs.Var(&f.includeByPath, "media-include-by-path", "make any whole block device with a by-path name matching this glob a member of the pool, e.g. 'pci-0000:00:1f.2-ata-3' for a hot-swap bay (repeatable)")
	f.discovery.register(fs)
	// The pool was first the USB pool: its flags keep their first names.
	for _, name := range []string{"pool", "sysfs-root", "device-glob", "dev-dir", "by-id-dir", "mount-info",
		"allow-vendor", "deny-vendor", "allow-model", "deny-model", "allow-serial", "deny-serial", "allow-by-id", "deny-by-id"} {
		fs.Var(fs.Lookup("media-"+name).Value, "usb-"+name, "the same as -media-"+name+" (its name from when the pool took USB disks only)")
	}
	klog.InitFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: csi-fat driver [OPTIONS]\n\n"+
			"Run the CSI plugin: identity, controller and node services on one gRPC server. Volumes\n"+
			"are FAT file systems in image files of the pool directory, or on removable media (USB\n"+
			"disks, SD cards, devices an include pattern names), and are\n"+
			"served through FUSE by a mounter process each (see --mounter). Every node runs it; volumes are accessible on the\n"+
			"node that made them only (topology key <driver-name>/node). Allow/deny patterns: a device\n"+
			"is used when it matches no deny pattern and, if any allow pattern is given, one of them.\n"+
			"Log verbosity: -v=2 logs failed calls of every kind, -v=4 every request and answer.\n\noptions:\n")
		fs.PrintDefaults()
	}
	return fs, f
}

// mounterConfig reads --mounter and --mounter-user.
func (f *driverFlags) mounterConfig() (mounters.Config, error) {
	var c mounters.Config
	switch f.mounter {
	case "auto":
		c.Mode = mounters.Process
		if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			c.Mode = mounters.InProcess
			if f.pods.image != "" {
				c.Mode = mounters.Pod
			}
		}
	case mounters.Pod, mounters.Process, mounters.InProcess:
		c.Mode = f.mounter
	default:
		return c, fmt.Errorf("--mounter %q: want pod, process, inprocess or auto", f.mounter)
	}
	u, g, ok := strings.Cut(f.mounterUser, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return c, fmt.Errorf("--mounter-user %q: want UID:GID, numeric", f.mounterUser)
	}
	uid32, gid32 := uint32(uid), uint32(gid)
	c.UID, c.GID = &uid32, &gid32
	c.NoUpgrade = !f.mounterUpgrade
	if c.Mode == mounters.Pod {
		pc, err := f.pods.config()
		if err != nil {
			return c, err
		}
		c.Pod = pc
	}
	return c, nil
}

func (f *driverFlags) config() driver.Config {
	cfg := driver.Config{
		Endpoint:       f.endpoint,
		DriverName:     f.driverName,
		MetricsAddress: f.metricsAddress,
		HealthAddress:  f.healthAddress,

		KubeletRegistrationDir:  f.registrationDir,
		KubeletRegistrationPath: f.registrationPath,
		Node: node.Config{
			NodeID:     f.nodeID,
			StateDir:   f.stateDir,
			PoolDir:    f.poolDir,
			Reserve:    int64(f.reserve),
			MaxVolumes: f.maxVolumes,
			// Used only by --mounter=inprocess; every binary links the engine for the mounter
			// and prober subcommands anyway.
			InProcess: inprocess.Engine{},
		},
	}
	if f.usb {
		u := f.usbCfg
		u.AllowVendors, u.DenyVendors = f.allowVendor, f.denyVendor
		u.AllowModels, u.DenyModels = f.allowModel, f.denyModel
		u.AllowSerials, u.DenySerials = f.allowSerial, f.denySerial
		u.AllowByID, u.DenyByID = f.allowByID, f.denyByID
		u.AllowByPath, u.DenyByPath = f.allowByPath, f.denyByPath
		u.IncludeByID, u.IncludeByPath = f.includeByID, f.includeByPath
		cfg.Node.USB = &u
	}
	return cfg
}

func runDriver(args []string) int {
	fs, f := newDriverFlagSet(os.Stderr)
	if ok, code := parseFlags(fs, args, 2); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "csi-fat driver: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if f.maxVolumes < 0 {
		fmt.Fprintf(os.Stderr, "csi-fat driver: --max-volumes %d is negative\n", f.maxVolumes)
		return 2
	}
	mc, err := f.mounterConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat driver: %v\n", err)
		return 2
	}
	defer klog.Flush()
	cfg := f.config()
	cfg.Node.Mounter = mc
	if cfg.Discovery, err = f.discovery.config(); err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat driver: %v\n", err)
		return 2
	}
	d, err := driver.New(cfg)
	if err != nil {
		klog.ErrorS(err, "starting the driver")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		klog.ErrorS(err, "driver stopped")
		return 1
	}
	klog.InfoS("driver stopped; staged volumes were written back")
	return 0
}
