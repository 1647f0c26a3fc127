// Package fatfuse serves a fatvol.Volume through FUSE, in-process, with the semantics and mount
// options of Linux's vfat (package mountopt): a thin skin over the engine that maps paths,
// attributes and errnos. It answers go-fuse's raw requests with node IDs and file handles of its
// own, kept in a state file beside the connection, so that a new server can take a live mount
// over after the previous one crashed or paused (TakeOver, Pause; docs/engine.md).
package fatfuse
