// Package mountopt is what a FAT mount through FUSE is set up with: its mount options, named
// and defaulted as Linux vfat's, and the read-ahead of its backing device. It holds no engine
// and reads no medium, so the privileged side (the node plugin, which mounts for its mounters)
// parses and checks mount options with it alone; fatfuse turns them into the engine's options.
package mountopt
