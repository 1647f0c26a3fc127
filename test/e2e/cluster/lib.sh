# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this file
# Shared by build.sh, up.sh, down.sh and load-images.sh: where things live and small helpers.
# Sourced, not run.

CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$CLUSTER_DIR/../../.." && pwd)
CACHE=${CSI_FAT_E2E_CACHE:-/var/cache/csi-fat-e2e}
BIN=$CACHE/bin
IMAGES=$CACHE/images
RUN=/var/lib/csi-fat-e2e
PKI=$RUN/pki
CONF=$RUN/config
PIDS=$RUN/pids
LOGS=$RUN/logs
HOST_STATE=$RUN/host-state
KUBECONFIG_ADMIN=$RUN/admin.kubeconfig

# What no packet may carry out of the default route's interface (up.sh installs a DROP rule for
# each in mangle POSTROUTING, down.sh removes them): to the service or pod ranges, from the pod
# range or the nodes' own network.
SAFETY_SPECS=("-d 10.96.0.0/12" "-d 10.244.0.0/16" "-s 10.244.0.0/16" "-s 10.200.0.0/24")

SERVICE_CIDR=10.96.0.0/12
SERVICE_IP=10.96.0.1
POD_CIDR=10.244.0.0/16
POD_SUBNET=10.244.0.0/24
POD_GATEWAY=10.244.0.1
PAUSE_IMAGE=registry.k8s.io/pause:3.10
CONTAINERD_SOCK=/run/containerd/containerd.sock
# The snapshot CRDs images.sh takes from the snapshotter's client module; up.sh installs them.
CRDS=$CACHE/crds
SNAPSHOT_CONTROLLER_USER=csi-fat-e2e:snapshot-controller

# The sysctls the cluster's parts change (the kubelet's kernel tunables, the bridge plugin's
# ip_forward, kube-proxy's route_localnet); up.sh records them and down.sh puts them back.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.route_localnet)

# The mounts whose propagation up.sh makes shared: the CSI driver's pod mounts hostPath /dev and
# /sys with HostToContainer, and paths on the root file system; the kubelet makes /var/lib/kubelet
# shared by itself.
SHARED_MOUNTS=(/ /dev /sys)

PATH=$BIN:$PATH
export PATH

log() { echo "$(date +%T) $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
require_root() { [ "$(id -u)" -eq 0 ] || die "must run as root"; }

# outward_interface prints the interface of the default route: the one the safety rules guard.
outward_interface() {
	ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}'
}

# node_ip prints the first IPv4 address of the default route's interface.
node_ip() {
	local dev
	dev=$(outward_interface)
	[ -n "$dev" ] || return 1
	ip -4 -o addr show dev "$dev" scope global | awk '{split($4, a, "/"); print a[1]; exit}'
}

node_name() { hostname | tr '[:upper:]' '[:lower:]'; }

# Several nodes (up.sh <count> with a count above 1): each node is node-<i>, with a network
# namespace of its own (NODE_NET_PREFIX<i>, a veth on the host's bridge NODE_BRIDGE, address
# 10.200.0.<10+i>), a mount namespace of its own (a file under NODE_NS_DIR) in which the host
# directories of NODE_LOCAL_DIRS are bind mounts of the node's own under $NODES/node-<i>, its own
# containerd (socket, root and state under the node's directories), kubelet (cgroup root
# /csi-fat-e2e/node-<i>) and kube-proxy. A cluster of one node is the host itself.
NODES=$RUN/nodes
NODE_COUNT_FILE=$RUN/node-count
NODE_NS_DIR=/run/csi-fat-e2e/ns
NODE_RUN_DIR=/run/csi-fat-e2e
NODE_NET_PREFIX=csi-fat-e2e-
NODE_BRIDGE=csife2e0
NODE_NET=10.200.0.0/24
NODE_GATEWAY=10.200.0.1
CGROUP_PARENT=csi-fat-e2e
# The host paths a node sees as its own: the kubelet's root, CNI's IP allocations, the pods' logs,
# the chart's default pool and state, and the end-to-end tests' host side.
NODE_LOCAL_DIRS=(/var/lib/kubelet /var/lib/cni /var/log/pods /var/log/containers /var/lib/csi-fat /var/lib/csi-fat-e2e/tests)

# node_count: how many nodes the running (or last started) cluster has; 1 when unknown.
node_count() { cat "$NODE_COUNT_FILE" 2>/dev/null || echo 1; }
# node_names <count>: the nodes' names, one a line.
node_names() {
	local n=$1 i
	if [ "$n" -eq 1 ]; then
		node_name
		return
	fi
	for ((i = 1; i <= n; i++)); do echo "node-$i"; done
}
# node_index <name>: i of node-<i>.
node_index() { echo "${1#node-}"; }
node_address() { echo "10.200.0.$((10 + $(node_index "$1")))"; }
node_netns() { echo "$NODE_NET_PREFIX$1"; }
node_mntns() { echo "$NODE_NS_DIR/$1"; }
node_dir() { echo "$NODES/$1"; }
node_pod_subnet() { echo "10.244.$(node_index "$1").0/24"; }
node_pod_gateway() { echo "10.244.$(node_index "$1").1"; }
node_containerd_sock() { echo "$NODE_RUN_DIR/$1/containerd.sock"; }
# in_node <name> <command...>: runs the command in the node's network and mount namespaces.
in_node() {
	local name=$1
	shift
	nsenter --net="/run/netns/$(node_netns "$name")" --mount="$(node_mntns "$name")" -- "$@"
}
# containerd_socks: the socket of every node's containerd.
containerd_socks() {
	local n name
	n=$(node_count)
	if [ "$n" -eq 1 ]; then
		echo "$CONTAINERD_SOCK"
		return
	fi
	for name in $(node_names "$n"); do node_containerd_sock "$name"; done
}

# wait_for <seconds> <what> <command...>: runs the command every 0.2 s until it succeeds.
wait_for() {
	local limit=$1 what=$2
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $deadline ] || {
			log "timed out after ${limit}s waiting for $what"
			return 1
		}
		sleep 0.2
	done
}

# pid_alive <name>: the pid recorded for a daemon, if that process still runs the recorded binary.
pid_alive() {
	local name=$1 pid exe running
	[ -f "$PIDS/$name.pid" ] || return 1
	pid=$(cat "$PIDS/$name.pid")
	exe=$(cat "$PIDS/$name.exe" 2>/dev/null) || return 1
	[ -n "$pid" ] || return 1
	running=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	# A binary rebuilt while it runs reads as "<path> (deleted)".
	[ "${running% (deleted)}" = "$exe" ] || return 1
	echo "$pid"
}

kubectl_admin() { kubectl --kubeconfig "$KUBECONFIG_ADMIN" --request-timeout=10s "$@"; }

# process_binaries: "pid binary" of every process, read by one find rather than a fork per process.
process_binaries() {
	find /proc -mindepth 2 -maxdepth 2 -path '/proc/[0-9]*/exe' -printf '%h %l\n' 2>/dev/null |
		sed -e 's|^/proc/||' -e 's| (deleted)$||'
}

# cluster_processes: "pid name" of every process that is a part of this cluster, told apart from
# anything else on the machine by its binary (and, for containerd, by this cluster's config file).
cluster_processes() {
	local pid exe
	while read -r pid exe; do
		case $exe in
		"$BIN"/etcd | "$BIN"/kube-apiserver | "$BIN"/kube-controller-manager | "$BIN"/kube-scheduler | \
			"$BIN"/kubelet | "$BIN"/kube-proxy | "$BIN"/snapshot-controller) ;;
		*/containerd) tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -E -- "--config $CONF/(node-[0-9]+/)?containerd.toml" || continue ;;
		*) continue ;;
		esac
		echo "$pid ${exe##*/}"
	done < <(process_binaries)
}

# lock_cluster: one up.sh or down.sh at a time (several people may share the machine); a script
# run by one that holds the lock (up.sh runs down.sh) inherits it.
lock_cluster() {
	[ -n "${CSI_FAT_E2E_LOCK_HELD:-}" ] && return 0
	mkdir -p "$RUN"
	exec 9>"$RUN/lock"
	if ! flock -n 9; then
		log "waiting for another up.sh or down.sh to finish"
		flock -w 600 9 || die "still locked after 600 s: $RUN/lock"
	fi
	export CSI_FAT_E2E_LOCK_HELD=1
}

CONTROL_PLANE=(etcd kube-apiserver kube-controller-manager kube-scheduler snapshot-controller)
NODE_DAEMONS=(containerd kube-proxy kubelet)

# daemon_name <daemon> <node>: the name its pid is recorded under; a single node's are unsuffixed.
daemon_name() {
	if [ "$(node_count)" -eq 1 ]; then echo "$1"; else echo "$1-$2"; fi
}

# cluster_running: every part runs and every node is Ready.
cluster_running() {
	local name node
	for name in "${CONTROL_PLANE[@]}"; do
		pid_alive "$name" >/dev/null || return 1
	done
	for node in $(node_names "$(node_count)"); do
		for name in "${NODE_DAEMONS[@]}"; do
			pid_alive "$(daemon_name "$name" "$node")" >/dev/null || return 1
		done
		[ "$(kubectl_admin get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] || return 1
	done
}
