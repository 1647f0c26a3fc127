// Package e2e tests csi-fat end to end on a real Kubernetes cluster: the Helm chart installs the
// driver, and pods, claims and StorageClasses made with kubectl exercise it as users would. The
// on-disk results are judged on the node with fsck.fat and mtools.
//
// The tests need a single-node cluster running on this machine and root:
//
//	test/e2e/cluster/up.sh
//	CSI_FAT_E2E=1 go test -v ./test/e2e/...
//
// Without CSI_FAT_E2E=1 every test skips. kubectl and helm come from
// ${CSI_FAT_E2E_CACHE:-/var/cache/csi-fat-e2e}/bin, else from PATH; the cluster from $KUBECONFIG,
// else /var/lib/csi-fat-e2e/admin.kubeconfig. The host side of the tests (the image pool, the
// fake USB sticks) lives under /var/lib/csi-fat-e2e/tests while they run.
package e2e
