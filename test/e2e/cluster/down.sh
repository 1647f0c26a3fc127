#!/usr/bin/env bash
# Stops the local cluster and undoes what up.sh changed on the host: deletes the pods while the
# kubelet still runs (so it unmounts their volumes and frees their networks), stops every part by
# its recorded pid, then removes what is left: iptables chains and the safety rules, mounts, the
# bridge, cgroups, state directories; puts the recorded sysctls and mount propagation back. Safe
# to run twice or when nothing is up. Exits 1 if anything is still left at the end.
# --quiet: say nothing when there was nothing to do (up.sh runs it first).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
require_root
start=$SECONDS
quiet=false
[ "${1:-}" = --quiet ] && quiet=true
lock_cluster

# Mount points under the trees the cluster mounts into, deepest first.
# A cluster of several nodes has its nodes' directories and the files of their mount namespaces.
MOUNT_PATTERN="^(/var/lib/kubelet|/run/containerd|/run/netns/cni-|/run/netns/$NODE_NET_PREFIX|$NODES/|$NODE_RUN_DIR)"
cluster_mounts() {
	awk '{print $5}' /proc/self/mountinfo | while read -r m; do printf '%b\n' "$m"; done |
		grep -E "$MOUNT_PATTERN" | sort -r -u
}

# node_netns_left: the network namespaces of a cluster of several nodes.
node_netns_left() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NODE_NET_PREFIX" || true; }

# containerds: the socket of every containerd of the cluster (the host's, each node's).
containerds() {
	local s
	for s in "$CONTAINERD_SOCK" "$NODE_RUN_DIR"/*/containerd.sock; do
		[ -S "$s" ] && echo "$s"
	done
	return 0
}

# recorded <daemon>: the names of that daemon's recorded pids, the host's and each node's.
recorded() {
	local f
	for f in "$PIDS/$1.pid" "$PIDS/$1"-node-*.pid; do
		[ -f "$f" ] && basename "$f" .pid
	done
	return 0
}

kube_chains_left() {
	local rules
	rules=$({ iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; })
	grep -q -E 'KUBE-|CNI-' <<<"$rules"
}

anything_up() {
	[ -d "$PIDS" ] || [ -f "$HOST_STATE" ] || [ -d "$CONF" ] || [ -d /var/lib/kubelet ] || [ -d /run/containerd ] ||
		[ -d "$NODES" ] || [ -d "$NODE_RUN_DIR" ] || [ -n "$(node_netns_left)" ] ||
		ip link show "$NODE_BRIDGE" >/dev/null 2>&1 || [ -d "/sys/fs/cgroup/memory/$CGROUP_PARENT" ] ||
		[ -n "$(cluster_mounts)" ] || ip link show cni0 >/dev/null 2>&1 || kube_chains_left ||
		[ -n "$(cluster_processes)" ]
}

if ! anything_up; then
	$quiet || log "nothing to stop"
	exit 0
fi
log "stopping the cluster"

running_tasks() {
	local s
	for s in $(containerds); do
		ctr --address "$s" -n k8s.io tasks ls 2>/dev/null | awk 'NR > 1 && $3 == "RUNNING" {print $1}'
	done
}
no_running_tasks() { [ -z "$(running_tasks)" ]; }

# pods: "namespace name owner-kind" of each pod.
pods() {
	kubectl_admin get pods -A -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.name} {.metadata.ownerReferences[0].kind}{"\n"}{end}' 2>/dev/null
}

# delete_pods <seconds>: deletes the pods listed on stdin ("namespace name ...") with a short grace
# period (one kubectl per namespace) and waits until they are gone; the kubelet removes a pod from
# the API only once its containers are stopped and its volumes unmounted.
delete_pods() {
	local limit=$1 deadline=$(($1 + SECONDS)) listed left ns
	listed=$(awk 'NF >= 2 {print $1, $2}')
	[ -n "$listed" ] || return 0
	while read -r ns; do
		# shellcheck disable=SC2046 # one name per word
		kubectl_admin -n "$ns" delete pod $(awk -v ns="$ns" '$1 == ns {print $2}' <<<"$listed") \
			--grace-period=2 --wait=false >/dev/null 2>&1
	done < <(cut -d' ' -f1 <<<"$listed" | sort -u)
	while left=$(pods | awk '{print $1, $2}' | grep -x -F -f <(echo "$listed")) && [ -n "$left" ]; do
		[ $SECONDS -lt $deadline ] || {
			log "pods still there after $limit s: $(echo "$left" | tr '\n' ' ')"
			return 1
		}
		sleep 0.5
	done
}

# The pods go with a short grace period: a deletion the garbage collector started would use the
# pod's own (30 s by default), which the kubelet does not shorten later. So the controllers are
# deleted without their pods, and then the pods, those using the CSI node plugin's volumes before
# the plugin (a DaemonSet pod) that unmounts them.
delete_workloads() {
	local k kubelets=false before
	for k in $(recorded kubelet); do
		pid_alive "$k" >/dev/null && kubelets=true
	done
	$kubelets && pid_alive kube-apiserver >/dev/null && [ -f "$KUBECONFIG_ADMIN" ] || return 0
	before=$(pods)
	kubectl_admin delete deployments,statefulsets,replicasets,jobs,cronjobs,replicationcontrollers,daemonsets \
		--all -A --cascade=orphan --wait=false >/dev/null 2>&1
	awk '$3 != "DaemonSet"' <<<"$before" | delete_pods 60
	pods | delete_pods 30
	wait_for 20 "the kubelet to stop the containers" no_running_tasks
	log "pods deleted ($((SECONDS - start)) s)"
}

# alive <pid>: the process exists and is not a zombie waiting for init to reap it.
alive() {
	local state
	state=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $state != Z* ]]
}

# stop <names...>: SIGTERM to each recorded daemon still running, then wait for all; SIGKILL after 20 s.
stop() {
	local name pid pids=() began=$SECONDS deadline=$((SECONDS + 20))
	for name in "$@"; do
		pid=$(pid_alive "$name") || continue
		kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
	done
	for pid in "${pids[@]}"; do
		while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
		if alive "$pid"; then
			log "pid $pid did not stop on SIGTERM: SIGKILL"
			kill -KILL "$pid" 2>/dev/null
		fi
	done
	for name in "$@"; do rm -f "$PIDS/$name.pid" "$PIDS/$name.exe"; done
	[ ${#pids[@]} -eq 0 ] || log "stopped $* in $((SECONDS - began)) s"
}

kill_leftover_tasks() {
	local task s
	for s in $(containerds); do
		for task in $(timeout 10 ctr --address "$s" -n k8s.io tasks ls -q 2>/dev/null); do
			log "killing leftover task $task"
			ctr --address "$s" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1
			ctr --address "$s" -n k8s.io tasks delete -f "$task" >/dev/null 2>&1
		done
	done
}

# Processes still in the pods' cgroups, or shims of containerd's k8s.io namespace that outlived it.
kill_stragglers() {
	local pid
	while read -r pid; do
		log "killing pid $pid left in a pod cgroup: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
		kill -KILL "$pid" 2>/dev/null
	done < <(find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/"$CGROUP_PARENT" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
	local shim exe args
	shim=$(command -v containerd-shim-runc-v2) || return 0
	while read -r pid exe; do
		[ "$exe" = "$shim" ] || continue
		args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
		[[ $args == *"-namespace k8s.io "* && ($args == *"-address $CONTAINERD_SOCK "* || $args == *"-address $NODE_RUN_DIR/"*) ]] || continue
		log "killing leftover shim $pid"
		kill -KILL "$pid" 2>/dev/null
	done < <(process_binaries)
}

host_state() { [ -f "$HOST_STATE" ] && awk -v k="$1" '$1 == k {print $2, $3}' "$HOST_STATE"; }

remove_iptables() {
	local tool rules
	for tool in iptables ip6tables; do
		command -v "$tool-save" >/dev/null || continue
		# Read whole before grepping: grep -q stopping early would fail the pipe under pipefail.
		rules=$("$tool-save" 2>/dev/null) || continue
		grep -q -E 'KUBE-|CNI-' <<<"$rules" || continue
		grep -v -E 'KUBE-|CNI-' <<<"$rules" | "$tool-restore" -w || log "$tool-restore failed"
	done
	local iface spec
	iface=$(host_state interface | cut -d' ' -f1)
	[ -n "$iface" ] || iface=$(outward_interface)
	[ -n "$iface" ] || return 0
	for spec in "${SAFETY_SPECS[@]}"; do
		# shellcheck disable=SC2086 # spec is two words on purpose
		while iptables -w -t mangle -C POSTROUTING -o "$iface" $spec -j DROP 2>/dev/null; do
			iptables -w -t mangle -D POSTROUTING -o "$iface" $spec -j DROP
		done
	done
}

unmount_all() {
	local m
	for _ in 1 2 3 4 5; do
		[ -n "$(cluster_mounts)" ] || return 0
		while read -r m; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
		done < <(cluster_mounts)
	done
}

# The nodes' network namespaces (their veths go with them; the host's ends and routes too), the
# bridge, and the mount namespaces' files (unmounted with the cluster's mounts).
remove_node_networks() {
	local ns
	for ns in $(node_netns_left); do
		ip netns delete "$ns" || log "cannot delete network namespace $ns"
	done
	if ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
		ip link delete "$NODE_BRIDGE"
	fi
	return 0
}

remove_cgroups() {
	local d
	for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/"$CGROUP_PARENT"; do
		[ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	return 0
}

# rm -rf only where nothing is mounted any more: never reach through a mount into another file system.
remove_dir() {
	local d=$1
	[ -e "$d" ] || return 0
	local mounts
	mounts=$(awk '{print $5}' /proc/self/mountinfo)
	if grep -q -E "^$d(/|$)" <<<"$mounts"; then
		log "not removing $d: something is still mounted under it"
		return 1
	fi
	rm -rf --one-file-system "$d"
}

remove_state() {
	local d
	for d in /var/lib/kubelet /var/lib/containerd /run/containerd /var/lib/cni /var/log/pods /var/log/containers \
		"$RUN/etcd" "$PKI" "$CONF" "$PIDS" "$KUBECONFIG_ADMIN" "$NODES" "$NODE_RUN_DIR" "$NODE_COUNT_FILE"; do
		remove_dir "$d"
	done
	# The nodes' bind targets up.sh made on the host.
	for d in "${NODE_LOCAL_DIRS[@]}"; do
		host_state existed | awk '{print $1}' | grep -q -x -F "$d" || rmdir "$d" 2>/dev/null
	done
	rm -f /run/netns/cni-*
	if ! host_state existed | grep -q /run/netns; then
		# ip netns makes /run/netns a mount of its own.
		mountpoint -q /run/netns && umount /run/netns
		rmdir /run/netns 2>/dev/null
	fi
	return 0
}

restore_host() {
	local name value
	while read -r name value; do
		[ "$(sysctl -n "$name" 2>/dev/null)" = "$value" ] || sysctl -qw "$name=$value" || log "cannot reset $name to $value"
	done < <(host_state sysctl)
	while read -r name value; do
		[ "$(findmnt -n -o PROPAGATION --mountpoint "$name")" = "$value" ] && continue
		case $value in
		private) mount --make-private "$name" ;;
		slave) mount --make-slave "$name" ;;
		shared) mount --make-shared "$name" ;;
		*) log "unknown propagation $value recorded for $name" ;;
		esac
	done < <(host_state propagation)
	rm -f "$HOST_STATE"
}

report_leftovers() {
	local left=0 procs
	procs=$(cluster_processes)
	[ -z "$procs" ] || {
		log "still running: $(echo "$procs" | tr '\n' ' ')"
		left=1
	}
	[ -z "$(cluster_mounts)" ] || {
		log "left mounted: $(cluster_mounts | tr '\n' ' ')"
		left=1
	}
	kube_chains_left && {
		log "iptables chains left"
		left=1
	}
	ip link show cni0 >/dev/null 2>&1 && {
		log "link cni0 left"
		left=1
	}
	[ -z "$(node_netns_left)" ] || {
		log "network namespaces left: $(node_netns_left | tr '\n' ' ')"
		left=1
	}
	ip link show "$NODE_BRIDGE" >/dev/null 2>&1 && {
		log "link $NODE_BRIDGE left"
		left=1
	}
	ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/"$CGROUP_PARENT" >/dev/null 2>&1 && {
		log "kubepods cgroups left"
		left=1
	}
	return $left
}

delete_workloads
# shellcheck disable=SC2046 # one name per word
stop $(recorded kube-proxy) $(recorded kubelet) kube-scheduler kube-controller-manager snapshot-controller
kill_leftover_tasks
# shellcheck disable=SC2046 # one name per word
stop $(recorded containerd)
kill_stragglers
# The API server waits for etcd while it shuts down: etcd only after it.
stop kube-apiserver
stop etcd
log "stopped ($((SECONDS - start)) s)"
remove_iptables
remove_node_networks
unmount_all
ip link show cni0 >/dev/null 2>&1 && ip link delete cni0
remove_cgroups
remove_state
restore_host
if report_leftovers; then
	log "cluster down in $((SECONDS - start)) s"
else
	log "cluster down in $((SECONDS - start)) s, but something is left (see above)"
	exit 1
fi
