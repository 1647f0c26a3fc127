// Package media finds the removable media a node may use: whole block devices on a USB or
// MMC bus, and any device an include pattern names, read from sysfs, /dev/disk/by-id and
// by-path and the host's mountinfo, with the allow, deny and selection patterns applied.
//
// It reads names and attributes only: it never opens a device, and never reads what a medium
// holds (its partition table or file system is the layout prober's, an unprivileged process).
// A new way of finding or naming a device (another bus, another identity) goes here.
package media
