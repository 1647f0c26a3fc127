#!/usr/bin/env bash
# Writes the csi-fat driver's container image as an archive that `ctr -n k8s.io images import`
# (or `docker load`) reads, from this machine's files: no registry, base image or container
# engine is needed. The image holds what the Dockerfile's runtime stage holds: the static csi-fat
# binary at /csi-fat (entrypoint `/csi-fat`; the chart passes `driver ...`), fusermount3 (go-fuse mounts and unmounts
# through it), mount (k8s.io/mount-utils bind-mounts with it) and umount (mount-utils probes it),
# their shared libraries, and /etc/mtab -> ../proc/self/mounts as in Debian.
#
#   build/image.sh OUTPUT.tar [NAME]     NAME defaults to ghcr.io/csi-fat/csi-fat:e2e
#
# $CSI_FAT_VERSION: the version the driver reports (driver.Version), "dev" unless set.
# $CSI_FAT_BINARY: a csi-fat binary to use instead of building one here (CGO_ENABLED=0, -trimpath).
# Needs go, fuse3 (fusermount3) and mount; the archive is the same bytes for the same inputs.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 OUTPUT.tar [NAME]" >&2
	exit 2
fi
output=$1
name=${2:-ghcr.io/csi-fat/csi-fat:e2e}
repo=$(cd "$(dirname "$0")/.." && pwd)

# The host paths of the programs the driver execs, with /bin -> usr/bin resolved.
host_program() {
	local p
	if ! p=$(command -v "$1"); then
		echo "$0: $1 not found; install Debian's $2 package" >&2
		exit 1
	fi
	readlink -f "$p"
}
fusermount3=$(host_program fusermount3 fuse3)
mount=$(host_program mount mount)
umount=$(host_program umount mount)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

binary=${CSI_FAT_BINARY:-}
if [ -z "$binary" ]; then
	binary=$work/csi-fat
	(cd "$repo" && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X github.com/csi-fat/csi-fat/driver.Version=${CSI_FAT_VERSION:-dev}" \
		-o "$binary" ./cmd/csi-fat)
fi
(cd "$repo" && go build -o "$work/imagearchive" ./build/imagearchive)

"$work/imagearchive" -o "$output" -name "$name" \
	-file "$binary=/csi-fat" \
	-file "$fusermount3" -file "$mount" -file "$umount" \
	-symlink /bin=usr/bin \
	-symlink /etc/mtab=../proc/self/mounts \
	-- /csi-fat
