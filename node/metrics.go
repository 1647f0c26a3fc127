package node

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descRequests = prometheus.NewDesc("csi_fat_volume_device_requests_total",
		"Requests that reached a staged volume's device, by operation (read, write); flushes are counted apart.",
		[]string{"volume_id", "op"}, nil)
	descBytes = prometheus.NewDesc("csi_fat_volume_device_bytes_total",
		"Bytes moved to and from a staged volume's device, by operation (read, write).",
		[]string{"volume_id", "op"}, nil)
	descFlushes = prometheus.NewDesc("csi_fat_volume_device_flushes_total",
		"Cache flushes (fdatasync) of a staged volume's device.",
		[]string{"volume_id"}, nil)
	descErrors = prometheus.NewDesc("csi_fat_volume_device_errors_total",
		"Device requests of a staged volume that failed.",
		[]string{"volume_id"}, nil)
	descDirty = prometheus.NewDesc("csi_fat_volume_dirty_bytes",
		"File data of a staged volume written to the cache and not yet to the device.",
		[]string{"volume_id"}, nil)
	descNodes = prometheus.NewDesc("csi_fat_volume_server_nodes",
		"Files and directories of a staged volume that the kernel knows and its server holds in memory.",
		[]string{"volume_id"}, nil)
	descResident = prometheus.NewDesc("csi_fat_volume_server_resident_bytes",
		"Resident memory of a staged volume's mounter (not reported for a volume served in the plugin's process).",
		[]string{"volume_id"}, nil)
	descBound = prometheus.NewDesc("csi_fat_volume_server_memory_bound_bytes",
		"The memory a staged volume's mounter is held to (its pod's overhead plus the volume's cache size; not reported when unbounded).",
		[]string{"volume_id"}, nil)
	descMounter = prometheus.NewDesc("csi_fat_volume_mounter_info",
		"1 for each staged volume served by a mounter: its version (\"\" for one too old to say), and whether this plugin holds its FUSE connection (held=\"true\": a new mounter takes it over if it dies).",
		[]string{"volume_id", "version", "held"}, nil)
	descStaged = prometheus.NewDesc("csi_fat_volumes",
		"Volumes on this node, by pool, and how many of them are staged.",
		[]string{"pool", "staged"}, nil)
	descUSBDevices = prometheus.NewDesc("csi_fat_usb_devices",
		"Block devices the removable-media pool looked at, by state (claimed, busy, fat, blank, foreign, unreadable; "+
			"denied by the allow and deny lists; excluded, not a member) and what they hold or why "+
			"(superfloppy, partition; exfat, ntfs, ext4, crypto_LUKS, ..., partition_table, invalid_table, unknown; "+
			"mounted, held; not_removable, not_on_bus, no_medium, no_identity).",
		[]string{"state", "content"}, nil)
)

// Collector exposes the device counters of every staged volume, read at scrape time.
type Collector struct{ m *Manager }

// NewCollector collects the manager's volumes.
func NewCollector(m *Manager) *Collector { return &Collector{m: m} }

// Describe sends the descriptions of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descBytes, descFlushes, descErrors, descDirty, descNodes, descResident, descBound, descMounter, descStaged, descUSBDevices} {
		ch <- d
	}
}

// Collect reads the counters.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	m.store.Lock()
	type item struct {
		id string
		sv *servedVolume
	}
	var items []item
	counts := map[[2]string]int{}
	for name, v := range m.store.Volumes {
		staged := "false"
		if m.store.Staged[name] != nil {
			staged = "true"
		}
		counts[[2]string{v.Params.Pool, staged}]++
		if sv := m.served[name]; sv != nil {
			items = append(items, item{v.ID, sv})
		}
	}
	m.store.Unlock()
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descStaged, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	c.collectUSB(ch)
	for _, it := range items {
		h := it.sv.health(false, false)
		if it.sv.mounter() != nil && h.gone != "" {
			continue // its mounter is gone: no figures
		}
		s := h.device
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(s.Reads), it.id, "read")
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(s.Writes), it.id, "write")
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(s.BytesRead), it.id, "read")
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(s.BytesWritten), it.id, "write")
		ch <- prometheus.MustNewConstMetric(descFlushes, prometheus.CounterValue, float64(s.Flushes), it.id)
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(s.Errors), it.id)
		ch <- prometheus.MustNewConstMetric(descDirty, prometheus.GaugeValue, float64(h.dirty), it.id)
		if p := it.sv.mounter(); p != nil {
			v, _ := p.Build()
			ch <- prometheus.MustNewConstMetric(descMounter, prometheus.GaugeValue, 1, it.id, v, fmt.Sprint(it.sv.held != nil))
		}
		if mem := it.sv.memory(); mem != nil {
			ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(mem.Nodes), it.id)
			if mem.Resident > 0 {
				ch <- prometheus.MustNewConstMetric(descResident, prometheus.GaugeValue, float64(mem.Resident), it.id)
			}
			if mem.Bound > 0 {
				ch <- prometheus.MustNewConstMetric(descBound, prometheus.GaugeValue, float64(mem.Bound), it.id)
			}
		}
	}
}

// collectUSB counts the removable-media pool's devices by state and content.
func (c *Collector) collectUSB(ch chan<- prometheus.Metric) {
	if c.m.usb == nil {
		return
	}
	media, err := c.m.MediaStatus()
	if err != nil {
		return
	}
	counts := map[[2]string]int{}
	for _, med := range media {
		counts[[2]string{med.State, med.Content}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descUSBDevices, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}
