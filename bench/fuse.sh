#!/usr/bin/env bash
# Benchmark of `csi-fat mount` against the raw disk (the physical limit) and Debian's fusefat
# (the peer FUSE FAT implementation), in one run, on the same disk, each contender on its own
# fresh 2 GiB image file:
#   seq write    1 GiB with dd (1 MiB blocks), then fsync
#   seq read     the same 1 GiB, caches dropped and the volume remounted first
#   random read  4 KiB reads at random offsets of that file (fio, queue depth 1; caches dropped and
#                remounted first), by one reader and by 4 readers side by side
#   1 MiB files  1,000 files of 1 MiB, one write(2) each, then syncfs
#   4 KiB files  10,000 files of 4 KiB in one directory, one write(2) each, then syncfs
#   tree copy    cp -r of a source tree (Go's own, GOROOT/src) into a fresh volume, then made
#                durable; raw is the host's own file system (a directory beside the images)
#   tree read    the same tree read back cold with tar -cf - | wc -c, caches dropped (and the
#                volume remounted) first
#   busy rows    (raw and csi-fat, BUSY=1) the two sequential rows again with a CPU-bound process
#                (sha256sum of /dev/zero) running beside them the whole time
#   FUSE floor   (csi-fat, LOOPBACK=1) the two tree rows and the random reads through go-fuse's
#                own loopback file system over a directory of the host's: what any go-fuse file
#                system pays
#   device requests  (csi-fat, DEVREQ=1) the 1 GiB write again into a `-o flush` mount of a loop
#                device with direct I/O to its file: the average write request the device got
#                (/sys/block/loopN/stat), against the queue's max_sectors_kb and what one
#                `dd oflag=direct bs=1M` stream gets from the same device
# For csi-fat it also prints what the server spent: its CPU seconds (user+sys, whole mount
# including the unmount's writeback) per GiB and per tree, its peak RSS split into anonymous
# memory (heap, cache) and the binary's own mapped pages, and for the tree the FUSE requests
# (from -o debug) and the server's syscalls (strace -c -f) per file, from a separate counted run.
# raw is the image file itself with O_DIRECT: dd oflag=direct/iflag=direct for the sequential
# rows, fio --direct=1 for random reads; for the two file rows it is the same payload bytes
# written as one O_DIRECT stream of 1 MiB blocks. One request in flight at a time, so it is the
# disk's limit for a single synchronous stream, not a hard ceiling: buffered writeback that keeps
# several requests in flight can beat it. The mounts get no direct I/O: they go through the page
# cache as applications do, and every write row of a mount ends with an fsync of the image file
# too, because fusefat's fsync does not reach the disk.
# After each mount contender: unmount, fsck.fat -n, and (csi-fat) a content check on a fresh mount.
#
# Usage (root, from anywhere): bench/fuse.sh        QUICK=1 bench/fuse.sh for a smoke run (< 2 min)
# Knobs (environment):
#   CONTENDERS   which to run, default "raw csi-fat fusefat"
#   IMAGE_MB     image size (2048; QUICK 256)      SEQ_MB      sequential file size (1024; QUICK 64)
#   BIG_FILES    count of 1 MiB files (1000; QUICK 50)
#   SMALL_FILES  count of 4 KiB files (10000; QUICK 500)
#   TREE         the tree to copy ($(go env GOROOT)/src; QUICK its go/ subtree)
#   LOOPBACK     1 (default): the tree and random-read rows through go-fuse's loopback too; 0: skip
#   BUSY         1 (default): the sequential rows again beside a CPU-bound process; 0: skip
#   DEVREQ       1 (default): the device-request row on a loop device; 0: skip
#   COUNT        1 (default): count the tree's FUSE requests and syscalls in an extra run; 0: skip
#   RAND_MB      bytes read at random (64; QUICK 8), RAND_SECONDS: also stop after that (20; QUICK 5)
#   TIMEOUT      seconds per fusefat workload before "timeout" (180; QUICK 30)
#   CSI_TIMEOUT  the same for csi-fat and raw (600)
#   MOUNT_OPTS   csi-fat -o options; FUSEFAT_OPTS fusefat -o options (default rw+)
#   VERIFY       contenders whose files are read back and compared after a remount ("csi-fat")
#   WORKDIR      where the images live (default: new directory under ${TMPDIR:-/var/tmp}; it must
#                be on a real disk, not tmpfs); KEEP=1 keeps it
set -euo pipefail

if [[ ${QUICK:-0} == 1 ]]; then
	IMAGE_MB=${IMAGE_MB:-256} SEQ_MB=${SEQ_MB:-64} BIG_FILES=${BIG_FILES:-50}
	SMALL_FILES=${SMALL_FILES:-500} RAND_MB=${RAND_MB:-8} RAND_SECONDS=${RAND_SECONDS:-5}
	TIMEOUT=${TIMEOUT:-30} TREE=${TREE:-$(go env GOROOT)/src/go}
fi
CONTENDERS=${CONTENDERS:-raw csi-fat fusefat}
IMAGE_MB=${IMAGE_MB:-2048}
SEQ_MB=${SEQ_MB:-1024}
BIG_FILES=${BIG_FILES:-1000}
SMALL_FILES=${SMALL_FILES:-10000}
RAND_MB=${RAND_MB:-64}
RAND_SECONDS=${RAND_SECONDS:-20}
TIMEOUT=${TIMEOUT:-180}
CSI_TIMEOUT=${CSI_TIMEOUT:-600}
TREE=${TREE:-$(go env GOROOT)/src}
COUNT=${COUNT:-1}
DEVREQ=${DEVREQ:-1}
LOOPBACK=${LOOPBACK:-1}
BUSY=${BUSY:-1}
MOUNT_OPTS=${MOUNT_OPTS:-}
FUSEFAT_OPTS=${FUSEFAT_OPTS:-rw+}
VERIFY=${VERIFY:-csi-fat}
KEEP=${KEEP:-0}
BIG_KB=1024
SMALL_KB=4

die() { echo "fuse.sh: $*" >&2; exit 1; }
[[ $EUID == 0 ]] || die "run as root (drop_caches, mounts, apt-get)"

# Install what is missing: command -> Debian package.
missing=()
for pair in fio:fio fusefat:fusefat mkfs.fat:dosfstools fsck.fat:dosfstools fusermount3:fuse3 \
	/usr/bin/time:time timeout:coreutils strace:strace; do
	command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
	echo "installing: ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null ||
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null; }
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
WORKDIR=${WORKDIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/fuse-bench.XXXXXX")}
mnt=$WORKDIR/mnt
server_pid=
loopdev=
fuse_conn=

# abort_fuse ends a wedged FUSE connection so that nothing waits on it any more.
abort_fuse() {
	[[ -n $fuse_conn && -w /sys/fs/fuse/connections/$fuse_conn/abort ]] &&
		echo 1 >"/sys/fs/fuse/connections/$fuse_conn/abort" 2>/dev/null || true
}
cleanup() {
	if mountpoint -q "$mnt" 2>/dev/null; then
		timeout 60 umount "$mnt" 2>/dev/null || { abort_fuse; umount -l "$mnt" 2>/dev/null || true; }
	fi
	if [[ -n $server_pid ]]; then
		kill "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	if [[ -n ${loopdev:-} ]]; then losetup -d "$loopdev" 2>/dev/null || true; fi
	if [[ $KEEP != 1 ]]; then rm -rf "$WORKDIR"; else echo "kept $WORKDIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$mnt"
echo "building csi-fat and the helper"
(cd "$repo" && go build -o "$WORKDIR/csi-fat" ./cmd/csi-fat && go build -o "$WORKDIR/fusecompare" ./bench/fusecompare)
csifat=$WORKDIR/csi-fat
helper=$WORKDIR/fusecompare

now() { date +%s.%N; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

[[ -d $TREE ]] || die "TREE $TREE is not a directory"
tree_files=$(find "$TREE" -type f | wc -l)

# Results: secs[ROW/CONTENDER] in seconds, iops[ROW/CONTENDER] for random reads, or
# state[ROW/CONTENDER] = "timeout (>Ns)" / "failed" / "skipped: why"; partial[ROW/CONTENDER] is
# the rate reached before a timeout, when the helper said how far it got.
declare -A secs iops state partial
rows=(seqwrite seqread seqwrite_busy seqread_busy randread randread4 files1m files4k treecopy treeread)
declare -A row_title=(
	[seqwrite]="seq write ${SEQ_MB} MiB + fsync (MiB/s)"
	[seqread]="seq read ${SEQ_MB} MiB, cold (MiB/s)"
	[seqwrite_busy]="  the same, a CPU hog beside (MiB/s)"
	[seqread_busy]="  the same, a CPU hog beside (MiB/s)"
	[randread]="random 4 KiB reads, cold (IOPS)"
	[randread4]="random 4 KiB reads, 4 readers (IOPS)"
	[files1m]="${BIG_FILES} files of 1 MiB + sync (files/s)"
	[files4k]="${SMALL_FILES} files of 4 KiB + sync (files/s)"
	[treecopy]="tree copy, $tree_files files + sync (files/s)"
	[treeread]="tree read back cold, tar (files/s)"
)
notes=()

limit_for() { [[ $1 == fusefat ]] && echo "$TIMEOUT" || echo "$CSI_TIMEOUT"; }

# measure ROW CONTENDER COMMAND...: runs COMMAND under the contender's time limit and records
# its wall time, or why there is none.
measure() {
	local row=$1 who=$2 limit t0 t1 rc=0
	shift 2
	limit=$(limit_for "$who")
	echo "  $who: ${row_title[$row]}"
	t0=$(now)
	timeout -k 10 "$limit" "$@" 2>"$WORKDIR/err" || rc=$?
	t1=$(now)
	local stopped
	stopped=$(sed -n 's/.*stopped after \([0-9]*\) of.*/\1/p' "$WORKDIR/err")
	case $rc in
	0) secs[$row/$who]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') ;;
	124 | 137)
		state[$row/$who]="timeout (>${limit}s)"
		if [[ -n $stopped ]]; then
			partial[$row/$who]=$(awk -v n="$stopped" -v s="$limit" 'BEGIN { printf "%.1f", n / s }')
			state[$row/$who]="timeout: $stopped in ${limit}s"
		fi
		;;
	*) state[$row/$who]="failed (exit $rc)"; cat "$WORKDIR/err" >&2 ;;
	esac
	return 0
}
ok() { [[ -n ${secs[$1/$2]:-} || -n ${iops[$1/$2]:-} ]]; }

# busy COMMAND...: runs COMMAND with a CPU-bound process beside it (one, on a machine of a few
# cores: a node whose other work competes with the mount's server for CPU), stopped afterwards.
busy() {
	local hog rc=0
	sha256sum /dev/zero &
	hog=$!
	"$@" || rc=$?
	kill "$hog" 2>/dev/null || true
	wait "$hog" 2>/dev/null || true
	return $rc
}

# random_read ROW CONTENDER FILE [fio options]: fio random 4 KiB reads of the first SEQ_MB of
# FILE, RAND_MB per reader; the result is fio's IOPS, summed over the readers (--group_reporting).
random_read() {
	local row=$1 who=$2 file=$3 limit out rc=0
	shift 3
	limit=$(limit_for "$who")
	echo "  $who: ${row_title[$row]}"
	out=$(timeout -k 10 "$limit" fio --name=randread --filename="$file" --rw=randread --bs=4k \
		--size="${SEQ_MB}M" --io_size="${RAND_MB}M" --runtime="$RAND_SECONDS" --ioengine=psync \
		--randrepeat=1 --group_reporting --minimal "$@" 2>"$WORKDIR/fio.err") || rc=$?
	case $rc in
	# terse format: field 8 is read IOPS
	0) iops[$row/$who]=$(awk -F';' '{ print $8 }' <<<"$out") ;;
	124 | 137) state[$row/$who]="timeout (>${limit}s)" ;;
	*) state[$row/$who]="failed (exit $rc)"; cat "$WORKDIR/fio.err" >&2 ;;
	esac
	return 0
}

# warm_tree reads the source tree, so that every copy reads it from memory and only the
# destination is measured.
warm_tree() { tar -C "$TREE" -cf - . | wc -c >/dev/null; }

new_image() { # new_image PATH: a fresh sparse file of IMAGE_MB formatted FAT32
	rm -f "$1"
	mkfs.fat -F 32 -C "$1" $((IMAGE_MB * 1024)) >/dev/null
}

run_raw() {
	local img=$WORKDIR/raw.img
	echo "raw: O_DIRECT on $img"
	rm -f "$img"
	truncate -s "${IMAGE_MB}M" "$img"
	measure seqwrite raw dd if=/dev/zero of="$img" bs=1M count="$SEQ_MB" oflag=direct conv=fsync,notrunc status=none
	drop_caches
	measure seqread raw dd if="$img" of=/dev/null bs=1M count="$SEQ_MB" iflag=direct status=none
	drop_caches
	if [[ $BUSY == 1 ]]; then
		busy measure seqwrite_busy raw dd if=/dev/zero of="$img" bs=1M count="$SEQ_MB" oflag=direct conv=fsync,notrunc status=none
		drop_caches
		busy measure seqread_busy raw dd if="$img" of=/dev/null bs=1M count="$SEQ_MB" iflag=direct status=none
		drop_caches
	fi
	random_read randread raw "$img" --direct=1
	drop_caches
	random_read randread4 raw "$img" --direct=1 --numjobs=4
	# The file rows: the same payload, one sequential direct stream, into unwritten space as on
	# a fresh volume.
	local bytes
	for row in files1m files4k; do
		[[ $row == files1m ]] && bytes=$((BIG_FILES * BIG_KB * 1024)) || bytes=$((SMALL_FILES * SMALL_KB * 1024))
		rm -f "$img"
		truncate -s "${IMAGE_MB}M" "$img"
		measure "$row" raw dd if=/dev/zero of="$img" bs=1M count="$bytes" iflag=count_bytes oflag=direct conv=fsync,notrunc status=none
	done
	rm -f "$img"
	# The tree rows: the host's own file system on the same disk (a kernel file system, the
	# figure to get close to). syncfs, as it has no cheaper way to make a whole tree durable.
	local dir=$WORKDIR/host-tree
	rm -rf "$dir"
	mkdir -p "$dir"
	warm_tree
	measure treecopy raw bash -c 'cp -r "$1" "$2/" && sync -f "$2"' _ "$TREE" "$dir"
	drop_caches
	measure treeread raw bash -c 'tar -C "$1" -cf - . | wc -c >/dev/null' _ "$dir"
	rm -rf "$dir"
}

# mount_contender WHO IMAGE [LABEL [WRAPPER...]]: starts the FUSE server under /usr/bin/time (for
# its peak RSS and CPU seconds; LABEL names the session for the CPU figures) and waits for the
# mount. WRAPPER (csi-fat only) runs the server under another command, such as strace.
session=0
declare -A session_label
mount_contender() {
	local who=$1 img=$2 label=${3:-} opts=()
	shift $(($# < 3 ? $# : 3))
	session=$((session + 1))
	session_label[$session]=$label
	local rssfile=$WORKDIR/rss.$who.$session
	case $who in
	csi-fat)
		[[ -n $MOUNT_OPTS ]] && opts=(-o "$MOUNT_OPTS")
		# First line the peak RSS, second user and system CPU seconds.
		/usr/bin/time -f $'%M\n%U %S' -o "$rssfile" "$@" "$csifat" mount "${opts[@]}" "$img" "$mnt" 2>>"$WORKDIR/$who.log" &
		;;
	loopback)
		# go-fuse's loopback file system over a directory of the host's (IMAGE is that directory).
		/usr/bin/time -f $'%M\n%U %S' -o "$rssfile" "$helper" loopback "$img" "$mnt" 2>>"$WORKDIR/$who.log" &
		;;
	fusefat)
		# fusefat logs every cluster it touches: that goes nowhere, or the log would be
		# gigabytes.
		/usr/bin/time -f %M -o "$rssfile" fusefat -f -o "$FUSEFAT_OPTS" "$img" "$mnt" >/dev/null 2>&1 &
		;;
	esac
	server_pid=$!
	for _ in $(seq 400); do
		if mountpoint -q "$mnt"; then
			fuse_conn=$(mountpoint -d "$mnt" | cut -d: -f2)
			if [[ $who == csi-fat ]]; then sample_memory "$(pgrep -P "$server_pid")" "$WORKDIR/mem.$session" & fi
			return 0
		fi
		kill -0 "$server_pid" 2>/dev/null || { tail -5 "$WORKDIR/$who.log" >&2 2>/dev/null; die "$who did not mount"; }
		sleep 0.05
	done
	die "$who: mount did not come up in 20 s"
}

# sample_memory PID OUT: until PID exits, reads its smaps_rollup every 0.1 s and leaves in OUT
# "peak-rss anonymous-at-peak file-backed-at-peak peak-anonymous", in KiB: what of the peak is the
# server's own memory (heap, the cache, buffers) and what the binary's pages mapped from the page
# cache (clean, shared with every process running the same binary).
sample_memory() {
	local pid=$1 out=$2 k v rss anon peak=0 peak_anon=0 max_anon=0
	[[ -n $pid ]] || return 0
	while [[ -r /proc/$pid/smaps_rollup ]]; do
		rss=0 anon=0
		while read -r k v _; do
			case $k in Rss:) rss=$v ;; Anonymous:) anon=$v ;; esac
		done <"/proc/$pid/smaps_rollup" 2>/dev/null || break
		((rss > peak)) && peak=$rss peak_anon=$anon
		((anon > max_anon)) && max_anon=$anon
		echo "$peak $peak_anon $((peak - peak_anon)) $max_anon" >"$out"
		sleep 0.1
	done
}

unmount_contender() {
	# A process killed by a timeout may hold the mount a moment longer ("target is busy").
	local tries=0
	until timeout 120 umount "$mnt" 2>/dev/null; do
		tries=$((tries + 1))
		((tries < 30)) || break
		sleep 1
	done
	if ((tries == 30)); then
		notes+=("$1: unmount hung; connection aborted")
		abort_fuse
		umount -l "$mnt" 2>/dev/null || true
		kill "$server_pid" 2>/dev/null || true
	fi
	wait "$server_pid" || notes+=("$1: server exited with status $?")
	server_pid= fuse_conn=
}

# peak_rss WHO: the largest maximum RSS over the contender's server processes, in MiB.
peak_rss() {
	cat "$WORKDIR"/rss."$1".* 2>/dev/null | awk '/^[0-9]+$/ { if ($1 > m) m = $1 } END { if (m) printf "%.1f", m / 1024 }'
}

run_mount() {
	local who=$1 img=$WORKDIR/$1.img
	if [[ $who != csi-fat || $BUSY != 1 ]]; then
		state[seqwrite_busy/$who]="not run" state[seqread_busy/$who]="not run"
	fi
	echo "$who: fresh ${IMAGE_MB} MiB FAT32 image $img"
	new_image "$img"

	mount_contender "$who" "$img" seqwrite
	# fusefat's fsync never reaches the disk (it calls no fsync; see strace), so every write row
	# of a mount ends with an fsync of the image file as well: durable is what is measured.
	measure seqwrite "$who" bash -c 'dd if=/dev/zero of="$1" bs=1M count="$2" conv=fsync status=none && sync "$3"' \
		_ "$mnt/big" "$SEQ_MB" "$img"
	unmount_contender "$who"

	local why="skipped: the write did not finish"
	if ok seqwrite "$who"; then
		drop_caches
		mount_contender "$who" "$img" seqread
		measure seqread "$who" dd if="$mnt/big" of=/dev/null bs=1M status=none
		unmount_contender "$who"
		drop_caches
		mount_contender "$who" "$img" randread
		random_read randread "$who" "$mnt/big"
		unmount_contender "$who"
		drop_caches
		mount_contender "$who" "$img" randread4
		random_read randread4 "$who" "$mnt/big" --numjobs=4
		unmount_contender "$who"
		if [[ $BUSY == 1 && $who == csi-fat ]]; then
			# The file again, in the clusters it had, then read back cold, beside the hog.
			mount_contender "$who" "$img" seqwrite_busy
			rm -f "$mnt/big"
			busy measure seqwrite_busy "$who" bash -c 'dd if=/dev/zero of="$1" bs=1M count="$2" conv=fsync status=none && sync "$3"' \
				_ "$mnt/big" "$SEQ_MB" "$img"
			unmount_contender "$who"
			drop_caches
			mount_contender "$who" "$img" seqread_busy
			busy measure seqread_busy "$who" dd if="$mnt/big" of=/dev/null bs=1M status=none
			unmount_contender "$who"
		fi
		mount_contender "$who" "$img"
		if [[ " $VERIFY " == *" $who "* ]]; then
			timeout -k 10 "$(limit_for "$who")" cmp -n $((SEQ_MB * 1048576)) "$mnt/big" /dev/zero ||
				notes+=("$who: the ${SEQ_MB} MiB file does not read back as written")
		fi
	else
		state[seqread/$who]=$why state[randread/$who]=$why state[randread4/$who]=$why
		state[seqwrite_busy/$who]=$why state[seqread_busy/$who]=$why
		mount_contender "$who" "$img"
	fi
	# Make room: 1 GiB + 1,000 MiB + the small files do not fit together in 2 GiB.
	timeout -k 10 "$(limit_for "$who")" rm -f "$mnt/big" || notes+=("$who: rm of the big file failed or timed out")
	measure files1m "$who" "$helper" write -fsync "$img" "$mnt/files1m" "$BIG_FILES" $((BIG_KB * 1024))
	measure files4k "$who" "$helper" write -fsync "$img" "$mnt/files4k" "$SMALL_FILES" $((SMALL_KB * 1024))
	unmount_contender "$who"

	if [[ " $VERIFY " == *" $who "* ]]; then
		drop_caches
		mount_contender "$who" "$img"
		for set in "files1m $BIG_FILES $BIG_KB" "files4k $SMALL_FILES $SMALL_KB"; do
			read -r name count kb <<<"$set"
			ok "$name" "$who" || continue
			timeout -k 10 "$(limit_for "$who")" "$helper" verify "$mnt/$name" "$count" $((kb * 1024)) ||
				notes+=("$who: $name did not read back as written after a remount")
		done
		unmount_contender "$who"
	fi

	if fsck.fat -n "$img" >"$WORKDIR/fsck.$who" 2>&1; then
		notes+=("$who: fsck.fat -n clean ($(tail -1 "$WORKDIR/fsck.$who" | sed 's/^[^:]*: //'))")
	else
		notes+=("$who: fsck.fat -n FAILED: $(head -5 "$WORKDIR/fsck.$who" | tr '\n' ' ')")
	fi
	rm -f "$img"
	run_tree "$who"
}

# run_tree WHO: the tree rows on a fresh image: copy and make durable (an fsync of the copied
# directory makes the whole volume durable in csi-fat; fusefat's reaches nothing, hence the fsync
# of the image file as in the other rows), unmount; drop caches, mount, read it back with tar.
run_tree() {
	local who=$1 img=$WORKDIR/$1-tree.img
	echo "$who: fresh ${IMAGE_MB} MiB FAT32 image for the tree, $img"
	new_image "$img"
	warm_tree
	mount_contender "$who" "$img" treecopy
	measure treecopy "$who" bash -c 'cp -r "$1" "$2/" && sync "$2/$(basename "$1")" && sync "$3"' _ "$TREE" "$mnt" "$img"
	unmount_contender "$who"
	if ok treecopy "$who"; then
		drop_caches
		mount_contender "$who" "$img" treeread
		measure treeread "$who" bash -c 'tar -C "$1" -cf - . | wc -c >/dev/null' _ "$mnt"
		unmount_contender "$who"
	else
		state[treeread/$who]="skipped: the copy did not finish"
	fi
	if fsck.fat -n "$img" >"$WORKDIR/fsck.$who.tree" 2>&1; then
		notes+=("$who: tree image fsck.fat -n clean ($(tail -1 "$WORKDIR/fsck.$who.tree" | sed 's/^[^:]*: //'))")
	else
		notes+=("$who: tree image fsck.fat -n FAILED: $(head -5 "$WORKDIR/fsck.$who.tree" | tr '\n' ' ')")
	fi
	if [[ $who == csi-fat && $COUNT == 1 ]]; then count_tree "$img"; fi
	rm -f "$img"
}

# count_tree IMAGE: the tree copy and read once more on a fresh image, counted: FUSE requests by
# opcode from -o debug's log, then (another fresh image) the server's syscalls with strace -c -f.
# Counts, unlike times, do not move with the machine's load.
declare -A counted
count_tree() {
	local img=$1 how log
	for how in requests syscalls; do
		new_image "$img"
		for phase in copy read; do
			log=$WORKDIR/count.$how.$phase
			local saved=$MOUNT_OPTS
			if [[ $how == requests ]]; then
				MOUNT_OPTS=${MOUNT_OPTS:+$MOUNT_OPTS,}debug
				: >"$WORKDIR/csi-fat.log"
				mount_contender csi-fat "$img" "" 
			else
				mount_contender csi-fat "$img" "" strace -f -c -o "$log"
			fi
			MOUNT_OPTS=$saved
			if [[ $phase == copy ]]; then
				warm_tree
				cp -r "$TREE" "$mnt/" && sync "$mnt/$(basename "$TREE")"
			else
				tar -C "$mnt" -cf - . | wc -c >/dev/null
			fi
			unmount_contender csi-fat
			if [[ $how == requests ]]; then
				grep -o 'rx [0-9]*: [A-Z_]*' "$WORKDIR/csi-fat.log" | awk '{ print $3 }' | sort | uniq -c | sort -rn >"$log"
			fi
			# "N per file: ..." with the five most frequent kinds.
			counted[$how/$phase]=$(awk -v f="$tree_files" -v how="$how" '
				how == "requests" { n[$2] = $1; t += $1 }
				how == "syscalls" && $1 ~ /^[0-9.]+$/ && NF >= 5 { n[$NF] = $4; if ($NF == "total") t = $4 }
				END {
					delete n["total"]
					printf "%.2f a file (%d):", t / f, t
					k = 0
					while (k < 5) {
						best = ""; for (o in n) if (best == "" || n[o] > n[best]) best = o
						if (best == "") break
						printf " %s %.2f", best, n[best] / f; delete n[best]; k++
					}
				}' "$log")
			drop_caches
		done
	done
	rm -f "$img"
}

# run_loopback: the tree and random-read rows through go-fuse's own loopback file system over a
# directory of the host's file system, mounted as csi-fat mounts are: the floor of any file system
# served with go-fuse on this machine (the kernel's FUSE round trips and go-fuse, no FAT engine
# behind).
run_loopback() {
	local dir=$WORKDIR/loopback-tree
	echo "loopback: go-fuse's loopback file system over $dir"
	rm -rf "$dir"
	mkdir -p "$dir"
	warm_tree
	mount_contender loopback "$dir" loopback-copy
	measure treecopy loopback bash -c 'cp -r "$1" "$2/" && sync -f "$2"' _ "$TREE" "$mnt"
	unmount_contender loopback
	drop_caches
	mount_contender loopback "$dir" loopback-read
	measure treeread loopback bash -c 'tar -C "$1" -cf - . | wc -c >/dev/null' _ "$mnt"
	unmount_contender loopback
	rm -rf "$dir"
	mkdir -p "$dir"
	dd if=/dev/zero of="$dir/big" bs=1M count="$SEQ_MB" oflag=direct conv=fsync status=none
	drop_caches
	mount_contender loopback "$dir" loopback-randread
	random_read randread loopback "$mnt/big"
	unmount_contender loopback
	drop_caches
	mount_contender loopback "$dir" loopback-randread4
	random_read randread4 loopback "$mnt/big" --numjobs=4
	unmount_contender loopback
	rm -rf "$dir"
}

# write_requests DEV: "requests sectors" the block device completed as writes so far
# (/sys/block/DEV/stat fields 5 and 7; sectors of 512 bytes whatever the device's block size).
write_requests() { awk '{ print $5, $7 }' "/sys/block/$1/stat"; }

# device_requests: how the 1 GiB copy reaches a device. A loop device with direct I/O to a fresh
# image file passes each request to the file as it comes (no second page cache merging them), so
# its request count is what the server's writes became. Contenders: the queue's largest request
# (max_sectors_kb) and one O_DIRECT dd stream of 1 MiB blocks onto the same device.
declare -A devreq
device_requests() {
	local img=$WORKDIR/loop.img dev opts=flush before_n before_s after_n after_s
	echo "csi-fat: device requests, a ${SEQ_MB} MiB copy into a -o flush mount of a loop device"
	truncate -s "${IMAGE_MB}M" "$img"
	loopdev=$(losetup --find --show --direct-io=on "$img")
	dev=$(basename "$loopdev")
	devreq[max]=$(cat "/sys/block/$dev/queue/max_sectors_kb")
	devreq[dio]=$(cat "/sys/block/$dev/loop/dio" 2>/dev/null || echo ?)
	read -r before_n before_s < <(write_requests "$dev")
	dd if=/dev/zero of="$loopdev" bs=1M count="$SEQ_MB" oflag=direct status=none
	read -r after_n after_s < <(write_requests "$dev")
	devreq[dd]=$(awk -v n=$((after_n - before_n)) -v s=$((after_s - before_s)) 'BEGIN { if (n) printf "%.0f", s / 2 / n }')
	mkfs.fat -F 32 "$loopdev" >/dev/null
	[[ -n $MOUNT_OPTS ]] && opts+=",$MOUNT_OPTS"
	read -r before_n before_s < <(write_requests "$dev")
	MOUNT_OPTS=$opts mount_contender csi-fat "$loopdev" devreq
	dd if=/dev/zero of="$mnt/big" bs=1M count="$SEQ_MB" conv=fsync status=none
	unmount_contender csi-fat
	read -r after_n after_s < <(write_requests "$dev")
	devreq[n]=$((after_n - before_n))
	devreq[kib]=$(awk -v n="${devreq[n]}" -v s=$((after_s - before_s)) 'BEGIN { if (n) printf "%.0f", s / 2 / n }')
	fsck.fat -n "$loopdev" >/dev/null || notes+=("device requests: fsck.fat -n found errors on $loopdev")
	losetup -d "$loopdev"
	loopdev=
	rm -f "$img"
}

# The machine may be shared: say how busy it was, since raw and the mounts run one after another.
load() { echo "load $(cut -d' ' -f1-3 /proc/loadavg), io pressure $(awk '/^some/ { sub("avg60=", "", $3); print $3 "%" }' /proc/pressure/io 2>/dev/null || echo ?)"; }
load_before=$(load)
started=$(now)
for who in $CONTENDERS; do
	case $who in
	raw) run_raw ;;
	csi-fat | fusefat) run_mount "$who" ;;
	*) die "unknown contender $who (want raw, csi-fat, fusefat)" ;;
	esac
done
if [[ " $CONTENDERS " == *" csi-fat "* && $LOOPBACK == 1 ]]; then run_loopback; fi
if [[ " $CONTENDERS " == *" csi-fat "* && $DEVREQ == 1 ]]; then device_requests; fi

# rate ROW WHO: the row's figure of merit, higher is better, or empty.
rate() {
	local row=$1 who=$2 s=${secs[$1/$2]:-}
	case $row in
	randread | randread4) echo "${iops[$row/$who]:-}" ;;
	seqwrite | seqread | seqwrite_busy | seqread_busy) [[ -n $s ]] && awk -v s="$s" -v m="$SEQ_MB" 'BEGIN { printf "%.1f", m / s }' ;;
	files1m) [[ -n $s ]] && awk -v s="$s" -v n="$BIG_FILES" 'BEGIN { printf "%.1f", n / s }' ;;
	files4k) [[ -n $s ]] && awk -v s="$s" -v n="$SMALL_FILES" 'BEGIN { printf "%.1f", n / s }' ;;
	treecopy | treeread) [[ -n $s ]] && awk -v s="$s" -v n="$tree_files" 'BEGIN { printf "%.1f", n / s }' ;;
	esac
}
cell() { # cell ROW WHO: the rate, or why there is none
	local r
	r=$(rate "$1" "$2")
	if [[ -n $r ]]; then echo "$r"
	elif [[ " $CONTENDERS " != *" $2 "* ]]; then echo "-"
	else echo "${state[$1/$2]:-?}"; fi
}
# ratio ROW A B: A's rate over B's; "~" when B timed out and only its rate so far is known.
ratio() {
	local a b approx=
	a=$(rate "$1" "$2") b=$(rate "$1" "$3")
	if [[ -z $b && -n ${partial[$1/$3]:-} ]]; then b=${partial[$1/$3]} approx="~"; fi
	[[ -n $a && -n $b ]] && awk -v a="$a" -v b="$b" -v p="$approx" 'BEGIN { if (b > 0) printf "%s%.2f", p, a / b; else print "-" }' || echo "-"
}

echo
disk=$(df --output=source "$WORKDIR" | tail -1)
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo));" \
	"$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM; kernel $(uname -r)"
echo "disk: $disk ($(findmnt -no FSTYPE -T "$WORKDIR")," \
	"rotational=$(cat /sys/block/"$(basename "$disk")"/queue/rotational 2>/dev/null || echo ?)); image ${IMAGE_MB} MiB FAT32;" \
	"csi-fat -o ${MOUNT_OPTS:-(none)}; fusefat -o $FUSEFAT_OPTS"
echo "run took $(awk -v a="$started" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }') s; before: $load_before; after: $(load)"
# CPU seconds (user+sys) of the csi-fat server per labelled mount, and per GiB moved.
cpu_of() { # cpu_of LABEL: the CPU seconds of the server session (csi-fat's, loopback's) with that label
	local i f
	for i in "${!session_label[@]}"; do
		for f in "$WORKDIR"/rss.csi-fat."$i" "$WORKDIR"/rss.loopback."$i"; do
			if [[ ${session_label[$i]} == "$1" && -f $f ]]; then
				awk 'NR == 2 { printf "%.2f", $1 + $2 }' "$f"
				return 0
			fi
		done
	done
	return 0
}
# The csi-fat CPU column: the server's CPU seconds over the mount that ran the row alone (the
# file rows share one mount: none).
fmt='| %-40s | %10s | %10s | %9s | %22s | %11s | %15s |\n'
printf "$fmt" workload raw csi-fat "csi-fat s" fusefat csi-fat/raw csi-fat/fusefat
printf "$fmt" "$(printf -- '-%.0s' {1..40})" ---------- ---------- --------- ---------------------- ----------- ---------------
for row in "${rows[@]}"; do
	c=$(cpu_of "$row")
	printf "$fmt" "${row_title[$row]}" "$(cell "$row" raw)" "$(cell "$row" csi-fat)" "${c:--}" "$(cell "$row" fusefat)" \
		"$(ratio "$row" csi-fat raw)" "$(ratio "$row" csi-fat fusefat)"
done
for who in csi-fat fusefat; do
	rss=$(peak_rss "$who") || true
	[[ -z $rss ]] || echo "$who server peak RSS: $rss MiB (max over its mounts, /usr/bin/time; per mount, in order:" \
		"$(for f in $(ls -v "$WORKDIR"/rss."$who".*); do awk '/^[0-9]+$/ { printf "%.0f ", $1 / 1024 }' "$f"; done)MiB)"
done
if [[ " $CONTENDERS " == *" csi-fat "* ]]; then
	gib=$(awk -v m="$SEQ_MB" 'BEGIN { print m / 1024 }')
	echo "csi-fat server CPU seconds (user+sys, from mount to the end of its unmount):"
	if compgen -G "$WORKDIR/mem.*" >/dev/null; then
		# The session with the highest RSS peak, split.
		cat "$WORKDIR"/mem.* | sort -n | tail -1 | awk '{
			printf "csi-fat server memory at its RSS peak (smaps_rollup every 0.1 s): %.1f MiB = anonymous %.1f MiB", $1 / 1024, $2 / 1024
			printf " (heap, the cache, buffers; the largest anonymous seen %.1f MiB) + %.1f MiB of the binary mapped from the page cache\n", $4 / 1024, $3 / 1024 }'
	fi
	for label in seqwrite seqread seqwrite_busy seqread_busy; do
		c=$(cpu_of $label)
		if [[ -n $c ]]; then
			printf '  %-13s %6s s, %5s s per GiB\n' "$label" "$c" "$(awk -v c="$c" -v g="$gib" 'BEGIN { printf "%.2f", c / g }')"
		fi
	done
	for label in treecopy treeread; do
		c=$(cpu_of $label)
		if [[ -n $c ]]; then
			printf '  %-13s %6s s, %5s ms per file\n' "$label" "$c" \
				"$(awk -v c="$c" -v f="$tree_files" 'BEGIN { printf "%.3f", c * 1000 / f }')"
		fi
	done
	for row in treecopy treeread randread randread4; do
		if [[ -n $(rate $row loopback) ]]; then
			unit="files/s" label=loopback-${row#tree}
			[[ $row == randread* ]] && unit=IOPS label=loopback-$row
			echo "  ${row_title[$row]} through go-fuse's loopback over the host's file system (the FUSE floor):" \
				"$(rate $row loopback) $unit, server $(cpu_of "$label") s; csi-fat/loopback $(ratio $row csi-fat loopback)"
		fi
	done
	if [[ -n ${devreq[kib]:-} ]]; then
		echo "device write requests of a ${SEQ_MB} MiB copy into a -o flush mount of a loop device (dio=${devreq[dio]}):" \
			"${devreq[n]} requests, ${devreq[kib]} KiB on average; queue max_sectors_kb ${devreq[max]}" \
			"(ratio $(awk -v a="${devreq[kib]}" -v b="${devreq[max]}" 'BEGIN { printf "%.2f", a / b }'));" \
			"dd oflag=direct bs=1M onto the device: ${devreq[dd]:-?} KiB on average"
	fi
	for k in requests/copy requests/read syscalls/copy syscalls/read; do
		if [[ -n ${counted[$k]:-} ]]; then
			what="FUSE requests"
			[[ ${k%/*} == syscalls ]] && what="server syscalls"
			echo "  tree ${k#*/}, $what: ${counted[$k]}"
		fi
	done
fi
for n in "${notes[@]}"; do echo "note: $n"; done
