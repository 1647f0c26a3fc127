#!/usr/bin/env bash
# up.sh [nodes]: starts a Kubernetes cluster of that many nodes (default 1, or
# $CSI_FAT_E2E_NODES) on this machine from what build.sh put in the cache, and waits until pods
# can be created. One node is the host itself; with several, each node has network and mount
# namespaces of its own (lib.sh). A cluster left half up is stopped first with down.sh; one that
# runs whole with as many nodes is left as it is (its images are imported again).
# Everything the host had before is recorded in /var/lib/csi-fat-e2e/host-state for down.sh.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
require_root
start=$SECONDS
COUNT=${1:-${CSI_FAT_E2E_NODES:-1}}
[[ $COUNT =~ ^[1-9]$ ]] || die "the node count must be 1 to 9, not $COUNT"

for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy etcd snapshot-controller; do
	[ -x "$BIN/$b" ] || die "$BIN/$b is missing: run test/e2e/cluster/build.sh"
done
compgen -G "$CRDS/snapshot.storage.k8s.io_*.yaml" >/dev/null || die "no snapshot CRDs in $CRDS: run test/e2e/cluster/build.sh"
[ -f "$IMAGES/pause.tar" ] || die "$IMAGES/pause.tar is missing: run test/e2e/cluster/build.sh"
for b in containerd containerd-shim-runc-v2 runc ctr iptables nsenter unshare; do
	command -v "$b" >/dev/null || die "$b is missing: run test/e2e/cluster/build.sh"
done

lock_cluster
# A running cluster may be in use: leave it be (down.sh first to start afresh); a half-up one goes.
if cluster_running; then
	[ "$(node_count)" -eq "$COUNT" ] ||
		die "a cluster of $(node_count) node(s) runs: down.sh first to start one of $COUNT"
	"$CLUSTER_DIR/load-images.sh"
	log "the cluster is already up (down.sh first to start afresh): export KUBECONFIG=$KUBECONFIG_ADMIN"
	exit 0
fi
"$CLUSTER_DIR/down.sh" --quiet

iface=$(outward_interface)
[ -n "$iface" ] || die "no default route: cannot tell the node's address"
# The API server's address: the host's; a single node's too.
HOST_IP=$(node_ip) || die "no IPv4 address on $iface"
mkdir -p "$RUN" "$PKI" "$CONF" "$PIDS" "$LOGS"
echo "$COUNT" >"$NODE_COUNT_FILE"
mapfile -t NODE_NAMES < <(node_names "$COUNT")
log "$COUNT node(s): ${NODE_NAMES[*]}; API server at $HOST_IP ($iface)"
rm -f "$LOGS"/*.log

record_host_state() {
	local s m
	{
		echo "interface $iface"
		for s in "${SYSCTLS[@]}"; do
			echo "sysctl $s $(sysctl -n "$s")"
		done
		for m in "${SHARED_MOUNTS[@]}"; do
			echo "propagation $m $(findmnt -n -o PROPAGATION --mountpoint "$m")"
		done
		[ -d /run/netns ] && echo "existed /run/netns"
		for m in "${NODE_LOCAL_DIRS[@]}"; do
			[ -d "$m" ] && echo "existed $m"
		done
		true
	} >"$HOST_STATE"
}

# Nothing the pods send may leave the machine: drop what heads out of the default route's interface
# to the service or pod ranges, or from the pod range. mangle POSTROUTING runs after kube-proxy's
# DNAT, so it only catches packets that would really leave.
install_safety_rules() {
	local spec
	for spec in "${SAFETY_SPECS[@]}"; do
		# shellcheck disable=SC2086 # spec is two words on purpose
		iptables -w -t mangle -I POSTROUTING -o "$iface" $spec -j DROP
	done
}

# The command a node's daemons start through: nothing for the host, nsenter into its namespaces
# for a node of its own (node_vars sets it).
IN_NODE=()

# start_daemon <name> <binary> <args...>: runs it (through IN_NODE) in its own session with its log
# under logs/; the process writes its own pid before it becomes the binary, so the pid is right
# even if setsid forks.
# It keeps no other descriptor of ours: not the lock's (9), which would outlive up.sh, nor a pipe
# of whatever ran up.sh, which would then wait for the daemon.
start_daemon() {
	local name=$1 binary=$2
	shift 2
	echo "$binary" >"$PIDS/$name.exe"
	# How it was started, for node.sh to start a node's daemons again.
	printf '%s\0' "${IN_NODE[@]}" "$binary" "$@" >"$PIDS/$name.cmd"
	rm -f "$PIDS/$name.pid"
	# shellcheck disable=SC2016 # expanded by the inner bash
	"${IN_NODE[@]}" setsid bash -c 'echo $$ >"$0"
		for fd in /proc/$$/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null
		done
		exec "$@"' "$PIDS/$name.pid" "$binary" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
	wait_for 5 "$name to start" test -s "$PIDS/$name.pid" || die "$name did not start"
}

# await <daemon> <seconds> <what> <command...>: wait_for that gives up at once if the daemon died.
await() {
	local name=$1 limit=$2 what=$3
	shift 3
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		pid_alive "$name" >/dev/null || {
			tail -n 20 "$LOGS/$name.log" >&2
			die "$name exited while waiting for $what (log: $LOGS/$name.log)"
		}
		[ $SECONDS -lt $deadline ] || {
			tail -n 20 "$LOGS/$name.log" >&2
			die "timed out after ${limit}s waiting for $what (log: $LOGS/$name.log)"
		}
		sleep 0.2
	done
	log "$what ($((SECONDS - start)) s)"
}

# node_vars <name>: sets what the configuration of that node uses: NODE_NAME, NODE_IP, NODE_CONF
# (its configuration directory), SOCK, CONTAINERD_ROOT, CONTAINERD_STATE, NODE_POD_SUBNET,
# NODE_POD_GATEWAY, CGROUP_ROOT ("" for the host's default), IN_NODE and SUFFIX (of its daemons' names).
node_vars() {
	NODE_NAME=$1
	if [ "$COUNT" -eq 1 ]; then
		NODE_IP=$HOST_IP NODE_CONF=$CONF SOCK=$CONTAINERD_SOCK
		CONTAINERD_ROOT=/var/lib/containerd CONTAINERD_STATE=/run/containerd
		NODE_POD_SUBNET=$POD_SUBNET NODE_POD_GATEWAY=$POD_GATEWAY CGROUP_ROOT="" SUFFIX=""
		IN_NODE=()
		return
	fi
	NODE_IP=$(node_address "$NODE_NAME") NODE_CONF=$CONF/$NODE_NAME SOCK=$(node_containerd_sock "$NODE_NAME")
	CONTAINERD_ROOT=$(node_dir "$NODE_NAME")/containerd CONTAINERD_STATE=$NODE_RUN_DIR/$NODE_NAME/containerd
	NODE_POD_SUBNET=$(node_pod_subnet "$NODE_NAME") NODE_POD_GATEWAY=$(node_pod_gateway "$NODE_NAME")
	CGROUP_ROOT=/$CGROUP_PARENT/$NODE_NAME SUFFIX=-$NODE_NAME
	# A plain command, not lib.sh's in_node: a function run in the background would keep a shell
	# (and the lock's descriptor) waiting beside the daemon.
	IN_NODE=(nsenter --net="/run/netns/$(node_netns "$NODE_NAME")" --mount="$(node_mntns "$NODE_NAME")" --)
}

write_containerd_config() {
	cat >"$NODE_CONF/containerd.toml" <<EOF
version = 2
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # The kubelet asks for negative oom_score_adj values; without CAP_SYS_RESOURCE runc then fails
  # every sandbox, so containerd clamps them to what the process may set.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_CONF/cni"
EOF
}

# One bridge; no masquerading, since nothing in the tests needs to leave the machine.
write_cni_config() {
	mkdir -p "$NODE_CONF/cni"
	cat >"$NODE_CONF/cni/10-csi-fat-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "csi-fat-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$NODE_POD_SUBNET", "gateway": "$NODE_POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

write_kubelet_config() {
	cat >"$NODE_CONF/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host has cgroup v1 (hybrid); 1.37 refuses it unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$SOCK
address: $NODE_IP
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
# No cluster DNS: pods fall back to the node's resolver.
clusterDomain: cluster.local
failSwapOn: false
# A running pod's grown claim is seen at the pod's next sync: every 10 s rather than the default
# minute, so an online expansion does not wait up to a minute for its NodeExpandVolume.
syncFrequency: 10s
# The images are imported, not pulled: image garbage collection must never remove them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%"}
EOF
	# A node of its own puts its pods' cgroups under a parent of its own, beside the others'.
	[ -z "$CGROUP_ROOT" ] || echo "cgroupRoot: $CGROUP_ROOT" >>"$NODE_CONF/kubelet.yaml"
}

write_kube_proxy_config() {
	cat >"$NODE_CONF/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
clientConnection: {kubeconfig: $CONF/kube-proxy.kubeconfig}
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [primary]
# Leave the host's conntrack sysctls and route_localnet alone: no NodePort on localhost is needed.
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
}

# What the common snapshot controller does with distributed snapshotting and without volume group
# snapshots (after the snapshotter's deploy/kubernetes/snapshot-controller RBAC): it binds
# VolumeSnapshots to VolumeSnapshotContents it creates from their source PVC and PV, labels each
# content with the node its volume's node affinity names, and keeps the PVCs it snapshots from
# being deleted meanwhile (a finalizer).
snapshot_controller_rbac() {
	cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: csi-fat-e2e:snapshot-controller
rules:
  - apiGroups: [""]
    resources: ["persistentvolumes", "nodes"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["persistentvolumeclaims"]
    verbs: ["get", "list", "watch", "update"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["list", "watch", "create", "update", "patch"]
  - apiGroups: ["snapshot.storage.k8s.io"]
    resources: ["volumesnapshotclasses"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["snapshot.storage.k8s.io"]
    resources: ["volumesnapshotcontents"]
    verbs: ["create", "get", "list", "watch", "update", "delete", "patch"]
  - apiGroups: ["snapshot.storage.k8s.io"]
    resources: ["volumesnapshotcontents/status"]
    verbs: ["patch"]
  - apiGroups: ["snapshot.storage.k8s.io"]
    resources: ["volumesnapshots"]
    verbs: ["create", "get", "list", "watch", "update", "patch", "delete"]
  - apiGroups: ["snapshot.storage.k8s.io"]
    resources: ["volumesnapshots/status"]
    verbs: ["update", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: csi-fat-e2e:snapshot-controller
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: $SNAPSHOT_CONTROLLER_USER
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: csi-fat-e2e:snapshot-controller
EOF
}

node_ready() {
	[ "$(kubectl_admin get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# make_node_namespaces <name>: the node's network namespace, wired to the host's bridge by a veth
# pair, with the route to its pods on the host; its mount namespace, a slave of the host's (mounts
# on the host, a test's pool say, show through), where each of NODE_LOCAL_DIRS is a bind mount of
# the node's own directory; its cgroup parent in every hierarchy.
make_node_namespaces() {
	local name=$1 netns addr dir d h
	netns=$(node_netns "$name")
	addr=$(node_address "$name")
	ip netns add "$netns"
	ip link add "ve-$name" type veth peer name "vp-$name"
	ip link set "vp-$name" netns "$netns"
	ip -n "$netns" link set "vp-$name" name eth0
	ip -n "$netns" addr add "$addr/24" dev eth0
	ip -n "$netns" link set lo up
	ip -n "$netns" link set eth0 up
	ip -n "$netns" route add default via "$NODE_GATEWAY"
	ip link set "ve-$name" master "$NODE_BRIDGE" up
	ip route add "$(node_pod_subnet "$name")" via "$addr"

	dir=$(node_dir "$name")
	mkdir -p "$dir" "$NODE_RUN_DIR/$name"
	touch "$(node_mntns "$name")"
	unshare --mount="$(node_mntns "$name")" --propagation slave true
	for d in "${NODE_LOCAL_DIRS[@]}"; do
		mkdir -p "$dir/root$d" "$d"
		nsenter --mount="$(node_mntns "$name")" -- mount --bind "$dir/root$d" "$d"
	done
	# The kubelet leaves its root as it finds it when it is a mount point already, and a pod's
	# Bidirectional mount of it (the driver's) needs it shared: shared and still a slave of the
	# host's, so the host's mounts under it show through.
	nsenter --mount="$(node_mntns "$name")" -- mount --make-shared /var/lib/kubelet

	for h in /sys/fs/cgroup/*/; do
		mkdir -p "$h$CGROUP_PARENT/$name"
		if [ -f "$h/cpuset.cpus" ]; then
			for d in "$h$CGROUP_PARENT" "$h$CGROUP_PARENT/$name"; do
				cat "$h/cpuset.cpus" >"$d/cpuset.cpus"
				cat "$h/cpuset.mems" >"$d/cpuset.mems"
			done
		fi
	done
}

# start_node <name>: the node's containerd (and its images), kube-proxy and kubelet.
start_node() {
	node_vars "$1"
	mkdir -p "$NODE_CONF"
	write_containerd_config
	write_cni_config
	write_kubelet_config
	write_kube_proxy_config
	start_daemon "containerd$SUFFIX" "$(command -v containerd)" --config "$NODE_CONF/containerd.toml"
	await "containerd$SUFFIX" 30 "containerd of $NODE_NAME ready" ctr --address "$SOCK" version
	CONTAINERD_ADDRESS=$SOCK "$CLUSTER_DIR/load-images.sh"
	# kube-proxy first: a pod's first request to the kubernetes Service must find its rules in place.
	start_daemon "kube-proxy$SUFFIX" "$BIN/kube-proxy" --config="$NODE_CONF/kube-proxy.yaml"
	start_daemon "kubelet$SUFFIX" "$BIN/kubelet" \
		--config="$NODE_CONF/kubelet.yaml" --kubeconfig="$(kubelet_kubeconfig "$NODE_NAME")" \
		--node-ip="$NODE_IP" --hostname-override="$NODE_NAME"
	IN_NODE=()
}

kubelet_kubeconfig() {
	if [ "$COUNT" -eq 1 ]; then echo "$CONF/kubelet.kubeconfig"; else echo "$CONF/kubelet-$1.kubeconfig"; fi
}

record_host_state
install_safety_rules
# The CSI driver's pod mounts hostPath /dev and /sys (and paths on /) with HostToContainer, which
# needs them shared or slave; here they start private, as there is no systemd to share them.
for m in "${SHARED_MOUNTS[@]}"; do
	mount --make-shared "$m"
done

"$CLUSTER_DIR/certs.sh" "$HOST_IP" "${NODE_NAMES[@]}"
if [ "$COUNT" -gt 1 ]; then
	# The namespaces' files live on a private mount: a mount namespace may not be bound where
	# it would propagate.
	mkdir -p "$NODE_NS_DIR"
	mount --bind "$NODE_NS_DIR" "$NODE_NS_DIR"
	mount --make-private "$NODE_NS_DIR"
	ip link add "$NODE_BRIDGE" type bridge
	ip addr add "$NODE_GATEWAY/24" dev "$NODE_BRIDGE"
	ip link set "$NODE_BRIDGE" up
	for n in "${NODE_NAMES[@]}"; do make_node_namespaces "$n"; done
fi
log "certificates, configuration and namespaces ($((SECONDS - start)) s)"

start_daemon etcd "$BIN/etcd" --data-dir "$RUN/etcd"
await etcd 30 "etcd ready" grep -q "etcd ready" "$LOGS/etcd.log"

start_daemon kube-apiserver "$BIN/kube-apiserver" \
	--etcd-servers=http://127.0.0.1:2379 \
	--advertise-address="$HOST_IP" --bind-address="$HOST_IP" --secure-port=6443 \
	--service-cluster-ip-range="$SERVICE_CIDR" \
	--allow-privileged=true \
	--client-ca-file="$PKI/ca.crt" \
	--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
	--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
	--kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types=InternalIP \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction
await kube-apiserver 60 "kube-apiserver ready" kubectl_admin get --raw /readyz

start_daemon kube-controller-manager "$BIN/kube-controller-manager" \
	--kubeconfig="$CONF/controller-manager.kubeconfig" \
	--authentication-kubeconfig="$CONF/controller-manager.kubeconfig" \
	--authorization-kubeconfig="$CONF/controller-manager.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
	--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
	--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key"
start_daemon kube-scheduler "$BIN/kube-scheduler" \
	--kubeconfig="$CONF/scheduler.kubeconfig" \
	--authentication-kubeconfig="$CONF/scheduler.kubeconfig" \
	--authorization-kubeconfig="$CONF/scheduler.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false
# Snapshots: the CRDs and the common snapshot controller are a cluster's own (the driver's chart
# brings only the csi-snapshotter sidecar). Distributed snapshotting labels each content with its
# volume's node, which the node's csi-snapshotter (--node-deployment) selects on. The controller
# gives up if the CRDs are missing, so they come first.
kubectl_admin apply --server-side -f "$CRDS" >/dev/null
kubectl_admin wait --for condition=established --timeout=60s -f "$CRDS" >/dev/null
snapshot_controller_rbac | kubectl_admin apply -f - >/dev/null
start_daemon snapshot-controller "$BIN/snapshot-controller" \
	--kubeconfig="$CONF/snapshot-controller.kubeconfig" --leader-election=false \
	--enable-distributed-snapshotting --feature-gates=CSIVolumeGroupSnapshot=false --v=2
await snapshot-controller 30 "snapshot controller started" grep -q "Starting snapshot controller" "$LOGS/snapshot-controller.log"
for n in "${NODE_NAMES[@]}"; do start_node "$n"; done
for n in "${NODE_NAMES[@]}"; do
	await "$(daemon_name kubelet "$n")" 90 "node $n ready" node_ready "$n"
done

# The kubelet sets kernel.panic=10 and kernel.panic_on_oops=1 when it starts (and checks them only
# then): on a shared test machine an oops must not reboot it, so those go back at once.
while read -r kind name value; do
	case "$kind $name" in
	"sysctl kernel.panic" | "sysctl kernel.panic_on_oops" | "sysctl vm.panic_on_oom")
		sysctl -qw "$name=$value"
		;;
	esac
done <"$HOST_STATE"

# Pods can only be created once the default ServiceAccount exists, which comes after node Ready.
await kube-controller-manager 60 "default ServiceAccount" kubectl_admin -n default get serviceaccount default

log "cluster up in $((SECONDS - start)) s: export KUBECONFIG=$KUBECONFIG_ADMIN"
