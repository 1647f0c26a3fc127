// Package mediapool is the removable-media pool of a node: which sticks and cards a new volume
// may take (media finds them; the node's records say which are claimed, whole or by partition),
// what each holds (read by a prober, node/prober), how a volume adopts one's file system (checked
// in a mounter first) or formats one, and the status report of every device it looks at.
//
// With privilege it opens devices, claimed (O_EXCL) while it formats or wipes them, and writes
// new file systems (mkfs) on them. It never parses what a medium holds: the prober reads tables
// and boot sectors, and a mounter checks file systems, both unprivileged.
package mediapool
