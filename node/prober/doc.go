// Package prober is the privileged side's client of probers: what a free removable medium holds
// (layout.Probe: its partition table and signatures) is read, outside the in-process mode, by a
// short-lived process of its own (`csi-fat probe-medium`, mounter.ProbeMain) that runs as the
// mounters' unprivileged user with no capability and a bounded memory, on a read-only
// descriptor of the device, so that the plugin never parses what a medium holds.
//
// A prober's answer is as untrusted as the medium: it is read within a size bound and checked
// field by field; a prober that fails, dies or overruns its time leaves the medium unreadable,
// never the plugin misled. This package opens no device (it is handed descriptors), mounts
// nothing and never reads a medium's bytes itself; in the in-process mode, reading falls to the
// engine it is given (node/inprocess).
package prober
