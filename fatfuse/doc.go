// Package fatfuse serves a fatvol.Volume through FUSE, in-process, with the semantics and mount
// options of Linux's vfat (package mountopt): a thin skin over the engine that maps paths,
// attributes and errnos.
package fatfuse
