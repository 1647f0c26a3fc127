// Package volume holds what the node side knows of its volumes, as plain data with its rules:
// volume and snapshot IDs, StorageClass parameters checked and normalised, the records of the
// node-local state file (volumes, stagings, publications, mounters, snapshots) and how that
// file is read and written atomically, and the per-volume locks of operations in flight.
//
// It owns no device, process or mount and needs no privilege; it never reads a medium. Every
// other package of the node side shares these types, so a new StorageClass parameter starts
// here (params.go: its name, its check, its place in Params and in the volume context).
package volume
