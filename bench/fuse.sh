#!/usr/bin/env bash
# Benchmark of `csi-fat mount`: sequential write and read of one big file, and create, list,
# stat, read and remove of many small files, through a real FUSE mount of a fresh image.
# Cold reads come after a remount, so they reach the engine rather than the page cache.
#
# Usage: bench/fuse.sh            (from the repository root; needs root or fuse access,
#                                  fusermount3, and mkfs.fat)
# Knobs (environment): BIG_MB (default 512), FILES (default 5000), FILE_KB (default 4),
#   IMAGE_MB (default: enough for both, at least 1024), FAT (mkfs.fat -F: 12|16|32, default 32),
#   MOUNT_OPTS (passed as -o), WORKDIR (default: a new directory under ${TMPDIR:-/tmp}).
set -euo pipefail

BIG_MB=${BIG_MB:-512}
FILES=${FILES:-5000}
FILE_KB=${FILE_KB:-4}
FAT=${FAT:-32}
IMAGE_MB=${IMAGE_MB:-$(( BIG_MB + FILES * (FILE_KB + 32) / 1024 + 256 ))}
(( IMAGE_MB < 1024 )) && [[ $FAT == 32 ]] && IMAGE_MB=1024
MOUNT_OPTS=${MOUNT_OPTS:-}
WORKDIR=${WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/fatfuse-bench.XXXXXX")}

repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$WORKDIR/csi-fat
img=$WORKDIR/vol.img
mnt=$WORKDIR/mnt
log=$WORKDIR/mount.log
pid=

cleanup() {
	if mountpoint -q "$mnt" 2>/dev/null; then fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt" || true; fi
	if [[ -n $pid ]]; then wait "$pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
# report NAME SECONDS [RATE]: RATE is a byte count, "files" (for $FILES files), or absent.
report() {
	case ${3:-} in
	"") awk -v n="$1" -v s="$2" 'BEGIN { printf "%-28s %8.3f s\n", n, s }' ;;
	files) awk -v n="$1" -v s="$2" -v c="$FILES" 'BEGIN { printf "%-28s %8.3f s %10.0f files/s\n", n, s, c / s }' ;;
	*) awk -v n="$1" -v s="$2" -v b="$3" 'BEGIN { printf "%-28s %8.3f s %10.1f MiB/s\n", n, s, b / 1048576 / s }' ;;
	esac
}
timed() { # timed NAME [RATE] -- COMMAND...
	local name=$1 bytes=; shift
	if [[ $1 != -- ]]; then bytes=$1; shift; fi
	shift
	local t0 t1
	t0=$(now)
	"$@"
	t1=$(now)
	report "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" $bytes
}

mount_fat() {
	local opts=()
	[[ -n $MOUNT_OPTS ]] && opts=(-o "$MOUNT_OPTS")
	"$bin" mount "${opts[@]}" "$img" "$mnt" 2>>"$log" &
	pid=$!
	for _ in $(seq 200); do
		mountpoint -q "$mnt" && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
		sleep 0.05
	done
	echo "mount did not come up" >&2
	exit 1
}
unmount_fat() {
	fusermount3 -u "$mnt"
	wait "$pid"
	pid=
}

mkdir -p "$mnt"
(cd "$repo" && go build -o "$bin" ./cmd/csi-fat)
rm -f "$img"
mkfs.fat -F "$FAT" -C "$img" $(( IMAGE_MB * 1024 )) >/dev/null
echo "image: $IMAGE_MB MiB FAT$FAT; big file $BIG_MB MiB; $FILES files of $FILE_KB KiB; options: ${MOUNT_OPTS:-none}"

mount_fat
big=$(( BIG_MB * 1048576 ))
timed "write big (dd 1M, fsync)" $big -- dd if=/dev/zero of="$mnt/big" bs=1M count="$BIG_MB" conv=fsync status=none
timed "read big (cached)" $big -- dd if="$mnt/big" of=/dev/null bs=1M status=none
mkdir "$mnt/small"
create_small() {
	# The shell's own printf and redirection: no process per file to drown the mount's cost.
	local payload i
	payload=$(head -c $(( FILE_KB * 1024 )) /dev/urandom | base64 -w0 | head -c $(( FILE_KB * 1024 )))
	for (( i = 1; i <= FILES; i++ )); do printf '%s' "$payload" >"$mnt/small/file-$i.dat"; done
	sync -f "$mnt/small"
}
timed "create small (sh, sync)" files -- create_small
unmount_fat

mount_fat
timed "read big (cold)" $big -- dd if="$mnt/big" of=/dev/null bs=1M status=none
timed "list small (ls -f)" files -- sh -c "ls -f '$mnt/small' >/dev/null"
timed "stat small (find -ls)" files -- sh -c "find '$mnt/small' -type f -ls >/dev/null"
timed "read small (cat)" files -- sh -c "cat '$mnt'/small/* >/dev/null"
timed "remove small (rm)" files -- rm -rf "$mnt/small"
timed "remove big (rm)" -- rm -f "$mnt/big"
timed "unmount (write back)" -- unmount_fat
fsck.fat -n "$img" >/dev/null && echo "fsck.fat -n: clean"
rm -rf "$WORKDIR"
