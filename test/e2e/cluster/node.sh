#!/usr/bin/env bash
# node.sh stop|start <node>: takes a node of a cluster of several nodes down (its kubelet,
# kube-proxy and containerd stop; its pods' containers run on, as on a machine whose kubelet and
# runtime were stopped) or brings it back (the three start again as up.sh started them, in the
# node's namespaces, which stay while it is down).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
require_root
[ $# -eq 2 ] || die "usage: node.sh stop|start <node>"
action=$1 node=$2
[ "$(node_count)" -gt 1 ] || die "node.sh is for a cluster of several nodes (up.sh 3)"
node_names "$(node_count)" | grep -q -x -F "$node" || die "no node $node"
lock_cluster

stop_daemon() {
	local name=$1-$node pid
	pid=$(pid_alive "$name") || return 0
	kill -TERM "$pid"
	wait_for 30 "$name to stop" sh -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid"
	rm -f "$PIDS/$name.pid"
	log "stopped $name"
}

# start_daemon <daemon>: starts it again from the command line up.sh recorded (see its
# start_daemon: the process writes its pid, then closes every descriptor but the standard ones).
start_daemon() {
	local name=$1-$node cmd=()
	pid_alive "$name" >/dev/null && return 0
	mapfile -d '' cmd <"$PIDS/$name.cmd"
	local n=0
	while [ "${cmd[$n]}" != "$(cat "$PIDS/$name.exe")" ]; do n=$((n + 1)); done
	rm -f "$PIDS/$name.pid"
	# shellcheck disable=SC2016 # expanded by the inner bash
	"${cmd[@]:0:n}" setsid bash -c 'echo $$ >"$0"
		for fd in /proc/$$/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null
		done
		exec "$@"' "$PIDS/$name.pid" "${cmd[@]:n}" </dev/null >>"$LOGS/$name.log" 2>&1 &
	wait_for 5 "$name to start" test -s "$PIDS/$name.pid" || die "$name did not start"
	log "started $name"
}

case $action in
stop)
	stop_daemon kubelet
	stop_daemon kube-proxy
	stop_daemon containerd
	;;
start)
	start_daemon containerd
	wait_for 30 "containerd of $node" ctr --address "$(node_containerd_sock "$node")" version || die "containerd of $node is not up"
	start_daemon kube-proxy
	start_daemon kubelet
	;;
*) die "usage: node.sh stop|start <node>" ;;
esac
