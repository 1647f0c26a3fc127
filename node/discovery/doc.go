// Package discovery is discovery mode: every usable medium of a node's removable-media pool
// becomes a volume of its own, published as a PersistentVolume with the node's affinity that a
// claim picks by its labels; a medium pulled out marks its bound PV, and an unbound one is
// deleted. Each round lists the PVs, the node's discovered volumes and what the pool sees, plans
// (plan.go, a pure function of the three) and acts through the API server and node.Manager.
//
// It holds no privilege of its own: it talks to the API server, and makes and deletes volumes
// only through the Volumes it is given. It never opens a device.
package discovery
