package main

import (
	"os"

	"github.com/csi-fat/csi-fat/driver"
	"github.com/csi-fat/csi-fat/mounter"
)

func init() {
	register(&command{name: "mounter", summary: "serve one volume for the node plugin, unprivileged (started by the driver)",
		run: func(args []string) int {
			mounter.Version = driver.Version
			return mounter.Main(args, os.Stderr)
		}})
}
