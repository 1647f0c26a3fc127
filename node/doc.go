// Package node is csi-fat's node side: the pools that volumes live in (image files in a
// directory, removable media: USB sticks, SD cards, devices named by pattern), the node-local
// state that survives a restart of the plugin, the FUSE mounts that serve staged volumes, and
// the CSI node service. Volumes live on the node, so provisioning runs here too: the controller
// service in package driver calls Manager.
package node
