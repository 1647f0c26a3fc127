package main

import (
	"os"

	"github.com/csi-fat/csi-fat/mounter"
)

func init() {
	register(&command{name: "probe-medium", hidden: true, summary: "say what a removable medium holds, unprivileged (started by the driver)",
		run: func(args []string) int { return mounter.ProbeMain(args, os.Stdout, os.Stderr) }})
}
