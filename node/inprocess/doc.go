// Package inprocess is the engine in the plugin's own process, for --mounter=inprocess: it
// serves staged volumes through FUSE, checks and repairs file systems, and reads what a
// removable medium holds, all here instead of in an unprivileged mounter or prober.
//
// It is the one package of the node side that links the engine (fatvol, its checker and its
// layout reader) and the FUSE server, and so the one that parses what a medium holds with the
// plugin's privileges: the mode is for trusted media and for tests. Package node reaches it only
// through node.InProcess, which cmd/csi-fat hands in, so that no other node package imports
// the engine and their import lists show it.
package inprocess
