// Package hostmount is the node's mount(2): FUSE mounts of /dev/fuse at staging paths (the
// descriptor then goes to the server that serves it), bind mounts at publish targets, and the
// look-ups and lazy unmounts that clean up after a dead server or a previous run of the plugin.
//
// It needs CAP_SYS_ADMIN in the host's mount namespace, and it is the only node package that
// mounts. It never reads what a mount serves beyond a statfs, and never a medium.
package hostmount
