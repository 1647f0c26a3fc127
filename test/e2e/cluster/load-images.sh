#!/usr/bin/env bash
# Imports every image archive under ${CSI_FAT_E2E_CACHE:-/var/cache/csi-fat-e2e}/images into
# containerd's k8s.io namespace, the one the kubelet uses, on every node (each node of a cluster of
# several has a containerd of its own), or on the one whose socket $CONTAINERD_ADDRESS names.
# up.sh runs it; run it again while the cluster runs after an archive changed (a re-imported tag
# points at the new image; running pods keep theirs until they restart).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
require_root

shopt -s nullglob
archives=("$IMAGES"/*.tar)
[ ${#archives[@]} -gt 0 ] || die "no image archives in $IMAGES: run build.sh"
if [ -n "${CONTAINERD_ADDRESS:-}" ]; then
	socks=("$CONTAINERD_ADDRESS")
else
	mapfile -t socks < <(containerd_socks)
fi
for sock in "${socks[@]}"; do
	[ -S "$sock" ] || die "containerd is not running ($sock): start the cluster with up.sh"
	for archive in "${archives[@]}"; do
		out=$(ctr --address "$sock" -n k8s.io images import "$archive" 2>&1) || {
			echo "$out" >&2
			die "importing $archive into $sock failed"
		}
	done
	[ ${#socks[@]} -gt 1 ] || ctr --address "$sock" -n k8s.io images ls -q | grep -v '^sha256:' | sed 's/^/  /' >&2
	log "imported ${#archives[@]} image archive(s) from $IMAGES into $sock"
done
