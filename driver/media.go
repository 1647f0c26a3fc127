package driver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"

	"k8s.io/klog/v2"
)

// mediaStatus answers GET /media: every block device the removable-media pool looked at, its
// state and why it is or is not usable, so that an administrator sees why a stick is not used
// without reading the logs. A table for people (csi-fat media prints it), or JSON with
// ?format=json, with every name of each device (by-id, by-path) for writing patterns.
func (d *Driver) mediaStatus(w http.ResponseWriter, r *http.Request) {
	media, err := d.manager.MediaStatus()
	if err != nil {
		klog.ErrorS(err, "media status")
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	switch r.URL.Query().Get("format") {
	case "json":
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(media)
	case "", "text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "DEVICE\tID\tSIZE\tSTATE\tCONTENT\tREASON")
		for _, m := range media {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Kernel, dash(m.ID), dash(humanSize(m.Size)), m.State, dash(m.Content), m.Reason)
			for _, p := range m.Partitions {
				// One line per FAT partition, under its device: its ID is what a volume records.
				id := strconv.Itoa(p.Number)
				if p.GUID != "" {
					id = p.GUID
				}
				why := "free for adopt=true (" + p.Type + ")"
				if p.Volume != "" {
					why = "claimed by volume " + p.Volume
				}
				if p.Name != "" {
					why += fmt.Sprintf(", named %q", p.Name)
				}
				fmt.Fprintf(tw, "  partition %d\t%s\t%s\t%s\t%s\t%s\n", p.Number, id, humanSize(p.Size), p.State, "partition", why)
			}
		}
		tw.Flush()
	default:
		http.Error(w, "format: want text or json", http.StatusBadRequest)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanSize is a size in the largest binary unit that keeps one decimal ("58.2GiB"); "" for 0.
func humanSize(n int64) string {
	if n <= 0 {
		return ""
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", f), ".0") + units[i]
}
