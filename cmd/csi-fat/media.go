package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func init() {
	register(&command{name: "media", summary: "show the removable media a running driver sees, and why each is or is not usable", run: runMedia})
}

// runMedia asks a running driver for its removable-media status (GET /media on its metrics
// address, or its health address when it serves no metrics) and prints it: in a pod,
// kubectl exec ds/csi-fat-node -c csi-fat -- /csi-fat media.
func runMedia(args []string) int {
	fs := flag.NewFlagSet("media", flag.ContinueOnError)
	address := fs.String("address", "127.0.0.1:9810", "the driver's --metrics-address (the chart's metrics port), or its --health-address when it serves no metrics")
	asJSON := fs.Bool("json", false, "print JSON, with every by-id and by-path name of each device")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: csi-fat media [OPTIONS]\n\n"+
			"Print every block device the driver's removable-media pool looks at: its ID, size, state\n"+
			"(claimed, busy, fat, blank, foreign, unreadable, denied, excluded), what it holds and why it\n"+
			"is or is not usable; under a partitioned stick, one line per FAT partition (its number, its GUID\n"+
			"on a GPT, size, claimed by which volume or free for adopt=true), each a volume of its own.\n\noptions:\n")
		fs.PrintDefaults()
	}
	if ok, code := parseFlags(fs, args, 2); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "csi-fat media: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	url := "http://" + *address + "/media"
	if *asJSON {
		url += "?format=json"
	}
	client := http.Client{Timeout: time.Minute} // each free medium is read: a slow stick takes a while
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat media: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-fat media: %s: %v\n", url, err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "csi-fat media: %s: %s: %s", url, resp.Status, body)
		if resp.StatusCode == http.StatusNotFound {
			fmt.Fprintf(os.Stderr, "\n(is the driver's removable-media pool enabled, --media-pool?)\n")
		}
		return 1
	}
	os.Stdout.Write(body)
	return 0
}
