package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/driver"
	"github.com/csi-fat/csi-fat/node"
	"github.com/csi-fat/csi-fat/node/inprocess"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/volume"
)

func init() {
	register(&command{name: "demo", summary: "run the CSI driver without a cluster and mount one volume through it", run: runDemo})
}

// demoVolumeName is the CSI name of the demo's volume.
const demoVolumeName = "demo-volume"

type demoFlags struct {
	dir     string
	size    sizeFlag
	label   string
	mode    string
	keep    bool
	mounter string
	// set names the flags given on the command line: a kept volume's own settings win over
	// the defaults of the others.
	set map[string]bool
}

func newDemoFlagSet(out io.Writer) (*flag.FlagSet, *demoFlags) {
	f := &demoFlags{size: 64 << 20}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.dir, "dir", "/tmp/csi-fat-demo", "directory for the pool, the driver's state, its socket, its log and the mount")
	fs.Var(&f.size, "size", "volume size (K, M, G, T suffixes)")
	fs.StringVar(&f.label, "label", "CSIFATDEMO", "volume label")
	fs.StringVar(&f.mode, "mode", volume.ModeDefault, "write mode: default, flush or sync")
	fs.StringVar(&f.mounter, "mounter", mounters.Process, "where the volume is served: process (a mounter process of its own, which outlives the driver) or inprocess")
	fs.BoolVar(&f.keep, "keep", false, "on exit keep the volume (its image in DIR/pool and the driver's record of it in DIR/state) for the next run instead of deleting it")
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: csi-fat demo [OPTIONS]\n\n"+
			"Run the CSI driver on this machine with no cluster: start it with an image pool in\n"+
			"DIR/pool, then, as kubelet and the provisioner would, call CreateVolume, NodeStageVolume\n"+
			"(served through FUSE) and NodePublishVolume (a bind mount at DIR/volume) over its unix\n"+
			"socket. Then use DIR/volume like any directory until Ctrl-C (or SIGTERM), which unpublishes,\n"+
			"unstages, deletes the volume, stops the driver and removes what the demo made in DIR.\n"+
			"With --keep the volume stays, and the next run serves it again with what it holds (a\n"+
			"volume kept once is kept by every later run; rm -r DIR forgets it). Needs root and\n"+
			"/dev/fuse; --mounter=inprocess also fusermount3 (Debian's fuse3 package).\n\noptions:\n")
		fs.PrintDefaults()
	}
	return fs, f
}

func runDemo(args []string) int {
	fs, f := newDemoFlagSet(os.Stderr)
	if ok, code := parseFlags(fs, args, 2); !ok {
		return code
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "csi-fat demo: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if err := demoPreflight(f.mounter); err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat demo: %v\n", err)
		return 1
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat demo: %v\n", err)
		return 1
	}
	_, statErr := os.Stat(dir)
	madeDir := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat demo: %v\n", err)
		return 1
	}
	f.dir = dir
	logPath := filepath.Join(dir, "driver.log")
	if err := demoLogTo(logPath); err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat demo: %v\n", err)
		return 1
	}
	defer klog.Flush()

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	kept, err := demo(f, logPath, signals)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat demo: %v\n(driver log: %s)\n", err, logPath)
		return 1
	}
	klog.Flush()
	if err := tidyDemoDir(dir, kept, madeDir); err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat demo: %v\n", err)
		return 1
	}
	if kept {
		fmt.Printf("csi-fat demo: kept the volume: its image is in %s, the driver's record of it in %s,\n"+
			"the driver's log in %s; the next run serves it again (rm -r %s forgets it)\n",
			filepath.Join(dir, "pool"), filepath.Join(dir, "state"), logPath, dir)
	} else {
		fmt.Printf("csi-fat demo: removed what the demo made in %s\n", dir)
	}
	return 0
}

// tidyDemoDir removes what the demo made in dir once the driver has stopped: the mount points,
// the socket and, unless the volume is kept, the driver's state, its log and the empty pool
// (and dir itself when the demo made it). A kept volume keeps the pool, the state that records
// it and the log.
func tidyDemoDir(dir string, kept, madeDir bool) error {
	var errs []error
	remove := func(name string) {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	remove("volume")
	remove("staging")
	remove("csi.sock")
	if !kept {
		if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
			errs = append(errs, err)
		}
		remove("pool") // only when empty: never an image the demo did not delete
		remove("driver.log")
		if madeDir {
			remove("")
		}
	}
	return errors.Join(errs...)
}

// demoPreflight says plainly what the machine lacks. A mounter process is mounted by the
// driver itself; serving in-process mounts through fusermount3.
func demoPreflight(mounter string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root, as a CSI node plugin does: it mounts through FUSE and bind-mounts (try: sudo csi-fat demo)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("needs /dev/fuse: %v", err)
	}
	if mounter == mounters.InProcess {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			return fmt.Errorf("--mounter=%s needs fusermount3, from Debian's fuse3 package (apt-get install fuse3): %v", mounter, err)
		}
	}
	return nil
}

// demoLogTo sends the driver's log to a file, keeping the terminal for the demo's own words.
func demoLogTo(path string) error {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false",
		"stderrthreshold": "FATAL", "log_file": path, "v": "2"} {
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("log settings: %w", err)
		}
	}
	return nil
}

// demo runs the driver, mounts a volume through the CSI API, waits for a signal and undoes it.
// kept says whether the volume stays for the next run: it was asked for with --keep, or the
// volume is one an earlier run kept (a plain run never deletes what a user chose to keep).
func demo(f *demoFlags, logPath string, signals <-chan os.Signal) (kept bool, err error) {
	socket := filepath.Join(f.dir, "csi.sock")
	staging := filepath.Join(f.dir, "staging")
	target := filepath.Join(f.dir, "volume")
	d, err := driver.New(driver.Config{
		Endpoint: "unix://" + socket,
		Node: node.Config{
			NodeID:   "demo-node",
			StateDir: filepath.Join(f.dir, "state"),
			PoolDir:  filepath.Join(f.dir, "pool"),
			// The demo's pool lives wherever DIR is: keep only a small reserve.
			Reserve:   64 << 20,
			Mounter:   mounters.Config{Mode: f.mounter},
			InProcess: inprocess.Engine{},
		},
	})
	if err != nil {
		return false, err
	}
	d.Start()
	defer d.Stop()

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ident, ctrl, nodeSvc := csi.NewIdentityClient(conn), csi.NewControllerClient(conn), csi.NewNodeClient(conn)

	info, err := ident.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return false, fmt.Errorf("GetPluginInfo: %w", err)
	}
	ni, err := nodeSvc.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return false, fmt.Errorf("NodeGetInfo: %w", err)
	}
	fmt.Printf("csi-fat demo: driver %s %s serving CSI on unix://%s (node %s, topology %v)\n",
		info.GetName(), info.GetVendorVersion(), socket, ni.GetNodeId(), ni.GetAccessibleTopology().GetSegments())

	capability := &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "vfat"}},
	}
	// A volume an earlier run kept is served again, as it is: its own size and parameters
	// stand unless a flag given now says otherwise (and then CreateVolume says what differs).
	previous, err := keptDemoVolume(ctx, ctrl)
	if err != nil {
		return false, err
	}
	required := int64(f.size)
	params := map[string]string{volume.ParamLabel: f.label, volume.ParamMode: f.mode}
	if previous != nil {
		if !f.set["size"] {
			required = previous.GetCapacityBytes()
		}
		params = previous.GetVolumeContext()
		if f.set["label"] {
			params[volume.ParamLabel] = f.label
		}
		if f.set["mode"] {
			params[volume.ParamMode] = f.mode
		}
	}
	kept = f.keep || previous != nil
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:                      demoVolumeName,
		CapacityRange:             &csi.CapacityRange{RequiredBytes: required},
		VolumeCapabilities:        []*csi.VolumeCapability{capability},
		Parameters:                params,
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{ni.GetAccessibleTopology()}},
	})
	if err != nil {
		if previous != nil {
			return false, fmt.Errorf("CreateVolume: %w\n(%s holds the volume an earlier --keep run left, %s with %v: run with its settings, or remove %s to start afresh)",
				err, filepath.Join(f.dir, "pool"), humanSize(previous.GetCapacityBytes()), previous.GetVolumeContext(), f.dir)
		}
		return false, fmt.Errorf("CreateVolume: %w", err)
	}
	id := vol.GetVolume().GetVolumeId()
	if previous != nil {
		fmt.Printf("csi-fat demo: CreateVolume found %s, kept by an earlier run: %s in %s, served again as it is\n", id, humanSize(vol.GetVolume().GetCapacityBytes()), filepath.Join(f.dir, "pool"))
	} else {
		fmt.Printf("csi-fat demo: CreateVolume made %s: %s in %s\n", id, humanSize(vol.GetVolume().GetCapacityBytes()), filepath.Join(f.dir, "pool"))
	}

	cleanup := func() error {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		var errs []error
		if _, err := nodeSvc.NodeUnpublishVolume(cctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			errs = append(errs, fmt.Errorf("NodeUnpublishVolume: %w", err))
		}
		if _, err := nodeSvc.NodeUnstageVolume(cctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			errs = append(errs, fmt.Errorf("NodeUnstageVolume: %w", err))
		}
		if !kept && len(errs) == 0 {
			if _, err := ctrl.DeleteVolume(cctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
				errs = append(errs, fmt.Errorf("DeleteVolume: %w", err))
			}
		}
		if len(errs) > 0 {
			// Whatever the calls could not undo, the driver takes down itself.
			d.Manager().Release()
		}
		return errors.Join(errs...)
	}

	if _, err := nodeSvc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: capability, VolumeContext: vol.GetVolume().GetVolumeContext(),
	}); err != nil {
		return kept, errors.Join(fmt.Errorf("NodeStageVolume: %w", err), cleanup())
	}
	fmt.Printf("csi-fat demo: NodeStageVolume serves it through FUSE at %s\n", staging)
	if _, err := nodeSvc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: capability,
		VolumeContext: vol.GetVolume().GetVolumeContext(),
	}); err != nil {
		return kept, errors.Join(fmt.Errorf("NodePublishVolume: %w", err), cleanup())
	}
	fmt.Printf("csi-fat demo: NodePublishVolume bind-mounted it at %s\n", target)

	// HELLO.TXT greets on a new volume; a kept one holds the user's files, left as they are.
	hello := filepath.Join(target, "HELLO.TXT")
	if previous == nil {
		if err := os.WriteFile(hello, []byte("Hello from csi-fat: this file lives on a FAT volume served through FUSE.\r\n"), 0o644); err != nil {
			return kept, errors.Join(fmt.Errorf("write %s: %w", hello, err), cleanup())
		}
		fmt.Printf("csi-fat demo: wrote %s\n", hello)
	} else if entries, err := os.ReadDir(target); err == nil {
		fmt.Printf("csi-fat demo: it holds %d entries from before, left as they are\n", len(entries))
	}
	stats, err := nodeSvc.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil {
		return kept, errors.Join(fmt.Errorf("NodeGetVolumeStats: %w", err), cleanup())
	}
	for _, u := range stats.GetUsage() {
		fmt.Printf("csi-fat demo: NodeGetVolumeStats %-6s total %d, used %d, available %d\n", u.GetUnit(), u.GetTotal(), u.GetUsed(), u.GetAvailable())
	}
	fmt.Printf("csi-fat demo: condition: abnormal=%v (%s)\n", stats.GetVolumeCondition().GetAbnormal(), stats.GetVolumeCondition().GetMessage())
	end := "deletes the volume"
	switch {
	case previous != nil:
		end = "keeps the volume (an earlier run kept it)"
	case f.keep:
		end = "keeps the volume (--keep)"
	}
	fmt.Printf("\nThe volume is ready. In another terminal:\n\n    ls -la %s\n\n"+
		"Stop with Ctrl-C here (or: kill -INT %d). That unpublishes and unstages it, %s\n"+
		"and stops the driver. The driver's log is %s.\n", target, os.Getpid(), end, logPath)

	sig := <-signals
	fmt.Printf("\ncsi-fat demo: %v: cleaning up\n", sig)
	if err := cleanup(); err != nil {
		return kept, err
	}
	if kept {
		fmt.Printf("csi-fat demo: unpublished and unstaged the volume; stopped the driver\n")
	} else {
		fmt.Printf("csi-fat demo: unpublished, unstaged and deleted the volume; stopped the driver\n")
	}
	return kept, nil
}

// keptDemoVolume finds the demo's volume when an earlier run kept it, through ListVolumes as a
// CO would; nil when there is none.
func keptDemoVolume(ctx context.Context, ctrl csi.ControllerClient) (*csi.Volume, error) {
	token := ""
	for {
		resp, err := ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: token})
		if err != nil {
			return nil, fmt.Errorf("ListVolumes: %w", err)
		}
		for _, e := range resp.GetEntries() {
			if id, err := volume.ParseID(e.GetVolume().GetVolumeId()); err == nil && id.Name == demoVolumeName {
				return e.GetVolume(), nil
			}
		}
		if token = resp.GetNextToken(); token == "" {
			return nil, nil
		}
	}
}
