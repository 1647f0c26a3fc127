// Package node is csi-fat's node side: the CSI node service, and Manager, which runs the life
// of the node's volumes (made, staged, published, expanded, deleted; served again after a
// restart of the plugin) over the parts in the packages below it:
//
//   - node/volume: the records (IDs, parameters, the state's Store, the locks);
//   - node/imagepool and node/mediapool: the two pools, image files and removable media, with
//     node/media finding the media and node/prober reading, unprivileged, what they hold;
//   - node/discovery: discovery mode; node/snapshots: snapshots, restores and clones;
//   - node/mounters: the unprivileged mounters that serve volumes; node/hostmount: every mount;
//   - node/serving: what serving a volume means in either mode, and the interface of the
//     engine in the plugin's own process, which node/inprocess implements.
//
// Volumes live on the node, so provisioning runs here too: the controller service in package
// driver calls Manager. This package and its parts are the privileged side of the mounter
// split: they open devices (claimed, O_EXCL, while a volume uses them) and hand descriptors to
// mounters, and never parse what a medium holds; only node/inprocess links the engine
// (TestPrivilegedSideLeavesMediaAlone). A new StorageClass parameter goes in node/volume, a new
// pool beside imagepool and mediapool with its branch in Manager.createVolume, a new mounter
// operation in mounter/protocol with its client call in node/mounters.
package node
