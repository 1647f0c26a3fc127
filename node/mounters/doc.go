// Package mounters is the privileged side's handle on the unprivileged processes that serve
// volumes (mounters) and look at media (probers): it starts them, as processes of this host in
// sessions of their own or as pods through the API server, always as an unprivileged user with
// no capability; it talks to them over their control sockets (mounter/protocol); it adopts the
// mounters an earlier plugin process started, and ends those no staged volume names.
//
// With privilege it creates the sockets and logs under the state directory, kills the mounters
// it started (never a process whose command line is not a mounter's), and unmounts the mount of
// an orphaned mounter. It never opens a device or /dev/fuse, and never parses a medium: what a
// mounter serves reaches it as descriptors the caller opened.
package mounters
