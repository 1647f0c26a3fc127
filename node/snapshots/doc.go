// Package snapshots is a node's copies of volumes: snapshots (a volume's image or stick copied
// into the image pool's snapshots directory, of one moment: a staged volume is written back and
// held for the copy), and volumes made from a snapshot (a restore) or from another volume (a
// clone), in the image pool or on a stick. Each copy is checked, unprivileged, before it counts.
//
// With privilege it reads the source's device and writes the copy in the pool or on a claimed
// stick; it never parses a file system: the check runs in a mounter (node.Manager's CheckCopy).
package snapshots
