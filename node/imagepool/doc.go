// Package imagepool keeps volumes as sparse image files in one directory of a node-local disk:
// it sizes, creates and formats them (mkfs writes a new file system; nothing is read back),
// grows them, removes them and tells what the pool's file system has free.
//
// With privilege it writes only in the pool's directory. It never parses what an image holds:
// the images are volumes pods write, and reading them is the mounters' work.
package imagepool
