#!/usr/bin/env bash
# Builds what the local cluster needs besides Kubernetes and etcd, into the cache directory
# ${CSI_FAT_E2E_CACHE:-/var/cache/csi-fat-e2e}:
#   bin/csi-provisioner, bin/helm   from the pinned modules under tools/
#   bin/csi-resizer, bin/csi-snapshotter, bin/snapshot-controller   (tools/sidecars, one go build)
#   crds/                           the VolumeSnapshot, VolumeSnapshotContent and VolumeSnapshotClass
#                                   CRDs, from the snapshotter's client module as Go downloaded it
#   bin/csi-fat                     the driver, static, version $CSI_FAT_VERSION (default dev)
#   images/csi-fat.tar              ghcr.io/csi-fat/csi-fat:e2e (build/image.sh)
#   images/csi-provisioner.tar      registry.k8s.io/sig-storage/csi-provisioner:v6.4.0
#   images/csi-resizer.tar          registry.k8s.io/sig-storage/csi-resizer:v2.3.0
#   images/csi-snapshotter.tar      registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0
#   images/busybox.tar              e2e.csi-fat.io/busybox:1, Debian's busybox-static for test pods
# The archives are OCI layouts that `ctr -n k8s.io images import` names as above. Go's caches
# make a second run quick; an archive whose bytes would not change is left alone.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cache=${CSI_FAT_E2E_CACHE:-/var/cache/csi-fat-e2e}
mkdir -p "$cache/bin" "$cache/images" "$cache/crds"
export CGO_ENABLED=0

say() { echo "images.sh: $*"; }

say "csi-provisioner v6.4.0"
(cd "$here/tools/provisioner" && go build -ldflags "-s -w -X main.version=v6.4.0" \
	-o "$cache/bin/" github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner)
# One build for the three: they share the k8s.io modules, compiled once. Each main gets its own
# release as its version (the last -ldflags whose pattern matches a package wins).
say "csi-resizer v2.3.0, csi-snapshotter v8.7.0, snapshot-controller v8.7.0"
resizer=github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer
snapshotter=github.com/kubernetes-csi/external-snapshotter/v8/cmd
(cd "$here/tools/sidecars" && go build \
	-ldflags "$resizer=-s -w -X main.version=v2.3.0" -ldflags "$snapshotter/...=-s -w -X main.version=v8.7.0" \
	-o "$cache/bin/" "$resizer" "$snapshotter/csi-snapshotter" "$snapshotter/snapshot-controller")
# The snapshot CRDs of the client module the sidecars were built with, straight from Go's module
# cache (up.sh installs them): the repository holds no copy.
crd_dir=$(cd "$here/tools/sidecars" && go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8)/config/crd
for kind in volumesnapshotclasses volumesnapshotcontents volumesnapshots; do
	install -m 0644 "$crd_dir/snapshot.storage.k8s.io_$kind.yaml" "$cache/crds/"
done
say "helm v4.3.2"
(cd "$here/tools/helm" && go build -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v4.3.2" \
	-o "$cache/bin/" helm.sh/helm/v4/cmd/helm)
say "csi-fat"
(cd "$repo" && go build -trimpath \
	-ldflags "-s -w -X github.com/csi-fat/csi-fat/driver.Version=${CSI_FAT_VERSION:-dev}" \
	-o "$cache/bin/csi-fat" ./cmd/csi-fat)

if [ ! -x /bin/busybox ]; then
	say "installing busybox-static"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends busybox-static >/dev/null
fi

# Archives are written beside their final place and moved there only when they differ.
work=$(mktemp -d "$cache/images/.images.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$repo" && go build -o "$work/imagearchive" ./build/imagearchive)

# keep_or_replace NAME: moves $work/NAME over $cache/images/NAME unless they are the same bytes.
keep_or_replace() {
	if cmp -s "$work/$1" "$cache/images/$1"; then
		say "images/$1 unchanged"
	else
		mv "$work/$1" "$cache/images/$1"
		say "images/$1 written"
	fi
}

CSI_FAT_BINARY="$cache/bin/csi-fat" "$repo/build/image.sh" "$work/csi-fat.tar" ghcr.io/csi-fat/csi-fat:e2e
keep_or_replace csi-fat.tar

"$work/imagearchive" -o "$work/csi-provisioner.tar" -name registry.k8s.io/sig-storage/csi-provisioner:v6.4.0 \
	-file "$cache/bin/csi-provisioner=/csi-provisioner" -- /csi-provisioner
keep_or_replace csi-provisioner.tar

"$work/imagearchive" -o "$work/csi-resizer.tar" -name registry.k8s.io/sig-storage/csi-resizer:v2.3.0 \
	-file "$cache/bin/csi-resizer=/csi-resizer" -- /csi-resizer
keep_or_replace csi-resizer.tar

"$work/imagearchive" -o "$work/csi-snapshotter.tar" -name registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0 \
	-file "$cache/bin/csi-snapshotter=/csi-snapshotter" -- /csi-snapshotter
keep_or_replace csi-snapshotter.tar

# busybox with a link for each applet where busybox itself would install it (bin/sh, usr/bin/env...).
links=()
while read -r applet; do
	[ "$applet" = bin/busybox ] || links+=(-symlink "/$applet=/bin/busybox")
done < <(/bin/busybox --list-full)
"$work/imagearchive" -o "$work/busybox.tar" -name e2e.csi-fat.io/busybox:1 \
	-file /bin/busybox=/bin/busybox "${links[@]}" -- /bin/sh
keep_or_replace busybox.tar
