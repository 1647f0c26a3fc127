// Package volume holds what the node side knows of its volumes, as plain data with its rules:
// volume and snapshot IDs, StorageClass parameters checked and normalised, the records of the
// node-local state file (volumes, stagings, publications, mounters, snapshots) and how that
// file is read and written atomically (Store: the state with the mutex that guards it), the
// per-volume locks of operations in flight, and the look-ups every operation starts with,
// answered with the codes the CSI spec names.
//
// It owns no device, process or mount and needs no privilege; it never reads a medium. Every
// other package of the node side shares these types, so a new StorageClass parameter starts
// here (params.go: its name, its check, its place in Params and in the volume context).
package volume
