#!/usr/bin/env bash
# Builds what the local e2e cluster runs into ${CSI_FAT_E2E_CACHE:-/var/cache/csi-fat-e2e}: the
# Debian packages it needs, the six Kubernetes binaries and etcd from the pinned modules under
# tools/, and the pause image; then the sidecars, helm and the images through images.sh.
# Idempotent: with warm Go caches a rerun only checks (Go skips a link whose output already has
# the expected build ID).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
require_root
start=$SECONDS

install_packages() {
	local wanted=(containerd runc containernetworking-plugins iptables conntrack openssl) missing=() p
	for p in "${wanted[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The version variables are set in both packages: the components read the first, kubectl the second.
build_kubernetes() {
	local ldflags="-s -w" p
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $p.gitVersion=v1.37.2 -X $p.gitMajor=1 -X $p.gitMinor=37 -X $p.gitTreeState=clean"
		ldflags+=" -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=2026-01-01T00:00:00Z"
	done
	log "building kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy"
	(cd "$CLUSTER_DIR/tools/kubernetes" && CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$BIN/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy)
}

build_etcd() {
	log "building etcd"
	(cd "$CLUSTER_DIR/tools/etcd" && go build -o "$BIN/etcd" .)
}

# write_binary_image <binary> <tag> <archive>: a docker-archive holding one layer with the binary
# as /<name of binary>, its entrypoint. Written with fixed owners and times, and only replaced when
# the bytes differ, so an unchanged binary leaves the archive (and its image ID) as it was.
write_binary_image() {
	local binary=$1 tag=$2 archive=$3 name work layer_sum config config_sum
	name=$(basename "$binary")
	work=$(mktemp -d)
	mkdir "$work/root"
	install -m 0755 "$binary" "$work/root/$name"
	tar --create --file "$work/layer.tar" --directory "$work/root" \
		--owner=0 --group=0 --numeric-owner --mtime=@0 --sort=name "$name"
	layer_sum=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
	config=$(printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/%s"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$(go env GOARCH)" "$name" "$layer_sum")
	config_sum=$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)
	printf '%s' "$config" >"$work/$config_sum.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$config_sum" "$tag" >"$work/manifest.json"
	tar --create --file "$work/image.tar" --directory "$work" \
		--owner=0 --group=0 --numeric-owner --mtime=@0 --sort=name manifest.json "$config_sum.json" layer.tar
	mkdir -p "$(dirname "$archive")"
	if cmp -s "$work/image.tar" "$archive"; then
		rm -rf "$work"
		return 0
	fi
	mv "$work/image.tar" "$archive"
	rm -rf "$work"
	log "wrote $archive ($tag)"
}

build_pause() {
	local out
	out=$(mktemp -d)
	(cd "$REPO_DIR" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/pause" ./test/e2e/cluster/pause)
	write_binary_image "$out/pause" "$PAUSE_IMAGE" "$IMAGES/pause.tar"
	rm -rf "$out"
}

mkdir -p "$BIN" "$IMAGES"
install_packages
build_kubernetes
build_etcd
build_pause
if [ -f "$CLUSTER_DIR/images.sh" ]; then
	log "building the project's images (images.sh)"
	bash "$CLUSTER_DIR/images.sh"
fi
log "build done in $((SECONDS - start)) s"
