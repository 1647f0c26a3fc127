// Package e2e tests csi-fat end to end on a real Kubernetes cluster: the Helm chart installs the
// driver, and pods, claims and StorageClasses made with kubectl exercise it as users would. The
// on-disk results are judged on the node with fsck.fat and mtools.
//
// The tests need a cluster running on this machine and root. Most need a single node, this
// machine, whose mounts and pool they judge from here; those of multinode_test.go (TestNodes*)
// need three nodes, each in namespaces of its own. Each kind skips, saying so, on the other:
//
//	test/e2e/cluster/up.sh 1
//	CSI_FAT_E2E=1 go test -v ./test/e2e/...
//	test/e2e/cluster/down.sh && test/e2e/cluster/up.sh 3
//	CSI_FAT_E2E=1 go test -v -run '^TestNodes' ./test/e2e/...
//
// Without CSI_FAT_E2E=1 every test skips. kubectl and helm come from
// ${CSI_FAT_E2E_CACHE:-/var/cache/csi-fat-e2e}/bin, else from PATH; the cluster from $KUBECONFIG,
// else /var/lib/csi-fat-e2e/admin.kubeconfig. The host side of the tests (the image pool, the
// fake USB sticks) lives under /var/lib/csi-fat-e2e/tests while they run.
package e2e
