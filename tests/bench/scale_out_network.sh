#!/usr/bin/env bash
# A scale-out volume's client one network hop from its servers (issue 36;
# docs/scale-out.md, "Over a network"). A private PostgreSQL 15 (on TCP as
# well as its socket) and a private radosgw (tests/mount/postgres_lib.sh,
# s3_lib.sh) with two ways between a client and them:
#
#  - Delay: Toxiproxy (its `server`, from `go install
#    github.com/Shopify/toxiproxy/v2/cmd/server@v2.9.0`; TOXIPROXY_SERVER
#    names it) between the client and both servers, a latency toxic each
#    way. This kernel has no sch_netem (`tc qdisc ... netem`: "qdisc kind is
#    unknown", ../shared/FIELD-NOTES.md), so no packet loss either: a proxy
#    delays whole reads of a TCP stream. Toxiproxy counts whole
#    milliseconds: round trips of 2 ms and 20 ms, 1 ms and 10 ms each way.
#  - Partition: the client's daemon in a network namespace joined to this
#    one by a veth pair (10.201.7.1 here, .2 there), the servers on an
#    address of this side's loopback (10.201.8.1) that the namespace routes
#    to over the link and a client on this side reaches without it; the
#    link is set down.
#
# Rows:
#  - rsync -a of TREE, then densefs sync, onto a new volume per way: the
#    servers direct (loopback), then through the proxy at each round trip;
#    each against the first.
#  - the link down for PARTITION_S seconds under a writer that fsyncs a 100
#    KB file every 0.2 s in the namespace's mount, while a read-only
#    follower on this side lists them and the writer reads again a file it
#    read before. Reported: the fsyncs before, during and after, the
#    longest, the errors; the follower's and the cached read's times; then
#    every file whose fsync succeeded compared after a remount, and fsck.
# Not a test: a measurement; needs root, /dev/fuse, ip and nsenter.
# Usage: tests/bench/scale_out_network.sh [path/to/densefs] [TREE]
#   env RTTS (default "2 20", even numbers of ms), PARTITION_S (default
#   30), PARTS (default "rsync partition": which parts run)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tree=${2:-/usr/share/doc}
read -r -a rtts <<<"${RTTS:-2 20}"
partition_s=${PARTITION_S:-30}
parts=" ${PARTS:-rsync partition} "
# shellcheck source=../mount/mount_lib.sh
source "$repo/tests/mount/mount_lib.sh" "${1:-$repo/build/tools/densefs}" "$repo"
for t in ip nsenter rsync curl jq; do command -v "$t" >/dev/null || missing_tool "$t"; done
toxiproxy=${TOXIPROXY_SERVER:-${HOME:-/root}/go/bin/server}
# A bench's own tool: tools/setup.sh does not install it (missing_tool would
# say it does).
[[ -x $toxiproxy ]] ||
  skip "Toxiproxy's server is not installed: go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.9.0 (or set TOXIPROXY_SERVER to one)"

# --- the link (tests/mount/netns_lib.sh): this side 10.201.7.1, the
# namespace 10.201.7.2; the servers on 10.201.8.1, an address of this
# side's loopback.
# shellcheck source=../mount/netns_lib.sh
source "$repo/tests/mount/netns_lib.sh"
netns_up 10.201
host_ip=$netns_server_ip

pg_private=1
pg_listen=127.0.0.1,$host_ip
pg_listen_net=$netns_server_net
# shellcheck source=../mount/postgres_lib.sh
source "$repo/tests/mount/postgres_lib.sh"
s3_bind=0.0.0.0
# shellcheck source=../mount/s3_lib.sh
source "$repo/tests/mount/s3_lib.sh"

toxi_port=$(s3_free_port)
"$toxiproxy" -host 127.0.0.1 -port "$toxi_port" >"$work/toxiproxy.log" 2>&1 &
toxi_pid=$!
toxi_prev_exit_trap=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT\$/\\1/")
stop_toxiproxy() {
  local rc=$?
  set +e # (exit "$rc") must not end the trap (postgres_lib.sh)
  kill "$toxi_pid" 2>/dev/null
  (exit "$rc")
  eval "$toxi_prev_exit_trap"
  return "$rc"
}
trap stop_toxiproxy EXIT
toxi() { # METHOD PATH [JSON]
  curl -sf -X "$1" "http://127.0.0.1:$toxi_port$2" ${3:+-d "$3"} >/dev/null ||
    fail "Toxiproxy: $1 $2 ${3:-} failed ($(tail -n 3 "$work/toxiproxy.log"))"
}
for _ in {1..50}; do
  curl -sf "http://127.0.0.1:$toxi_port/version" >/dev/null && break
  sleep 0.1
done
pg_proxy=$(s3_free_port)
s3_proxy=$(s3_free_port)
toxi POST /proxies "{\"name\":\"pg\",\"listen\":\"127.0.0.1:$pg_proxy\",\"upstream\":\"127.0.0.1:$pg_port\"}"
toxi POST /proxies "{\"name\":\"s3\",\"listen\":\"127.0.0.1:$s3_proxy\",\"upstream\":\"127.0.0.1:$s3_port\"}"
# delay RTT_MS: half of it each way on both proxies.
delay() {
  local p s
  for p in pg s3; do
    for s in upstream downstream; do
      curl -sf -X DELETE "http://127.0.0.1:$toxi_port/proxies/$p/toxics/$s" >/dev/null || true
      toxi POST "/proxies/$p/toxics" \
        "{\"name\":\"$s\",\"type\":\"latency\",\"stream\":\"$s\",\"attributes\":{\"latency\":$(($1 / 2)),\"jitter\":0}}"
    done
  done
}

volumes=0
# new_volume NAME PG_HOST PG_PORT S3_HOST S3_PORT: a volume whose FORMAT
# names the servers (or the proxies) there.
new_volume() {
  pg_createdb "$1"
  "$densefs" mkfs --meta "host=$2 port=$3 user=postgres dbname=$1" \
    --data "s3://net/$1?endpoint=http://$4:$5" "$work/$1.store" >/dev/null
  mkdir -p "$work/$1.mnt"
}
timed() {
  local start
  start=$(now)
  "$@" >/dev/null
  elapsed "$start" "$(now)"
}

# --- rsync per way.
declare -a labels times
rsync_row() { # LABEL RTT_MS (empty: the servers direct)
  local v=v$((volumes += 1))
  if [[ -z $2 ]]; then
    new_volume "$v" 127.0.0.1 "$pg_port" 127.0.0.1 "$s3_port"
  else
    delay "$2"
    new_volume "$v" 127.0.0.1 "$pg_proxy" 127.0.0.1 "$s3_proxy"
  fi
  mount_densefs "$work/$v.store" "$work/$v.mnt"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  labels+=("$1")
  times+=("$(timed bash -c "rsync -a '$tree/' '$work/$v.mnt/t/' && '$densefs' sync '$work/$v.mnt'")")
  echo "$1: ${times[-1]} s" >&2
  umount_densefs "$work/$v.mnt"
}
if [[ $parts == *" rsync "* ]]; then
rsync_row "loopback (no proxy)" ""
for rtt in "${rtts[@]}"; do rsync_row "$rtt ms round trip (Toxiproxy)" "$rtt"; done

echo "tree: $tree ($(du -sb "$tree" | cut -f1) bytes, $(find "$tree" -type f | wc -l) files)"
printf '%-34s %10s %8s\n' "rsync -a + densefs sync" seconds "/ first"
for i in "${!labels[@]}"; do
  printf '%-34s %10s %8s\n' "${labels[$i]}" "${times[$i]}" \
    "$(awk -v a="${times[0]}" -v b="${times[$i]}" 'BEGIN { printf "%.2fx", b / a }')"
done
fi
[[ $parts == *" partition "* ]] || exit 0

# --- a partition under a writer.
new_volume part "$host_ip" "$pg_port" "$host_ip" "$s3_port"
w=$work/part.mnt
in_ns "$densefs" mount "$work/part.store" "$w" || fail "mounting the writer in the namespace failed"
mkdir -p "$w/p" "$work/p"
head -c 3000000 /dev/urandom >"$w/cached.bin"
cat "$w/cached.bin" >/dev/null
"$densefs" sync "$w" >/dev/null
mkdir -p "$work/follower.mnt"
# By the database's address, from a client directory of its own: another
# machine's view (the store directory would bind the writer's mount here,
# served by the daemon in the namespace).
mount_densefs "postgresql://postgres@127.0.0.1:$pg_port/part" "$work/follower.mnt" \
  -o ro,cache_dir="$work/follower.client"
stop=$work/stop
fsync_writer "$work/p" "$w/p" "$work/fsyncs" "$stop" &
writer=$!
# On core 0 (its dd and head inherit it), so that the writer's own reads
# below can be made from the same core and from another: over FUSE's
# io_uring each core's requests share one ring thread.
core0=() core1=()
if (($(nproc) > 1)); then
  taskset -pc 0 "$writer" >/dev/null
  core0=(taskset -c 0) core1=(taskset -c 1)
fi
sleep 5
cut_at=$(now)
netns_cut
sleep 2
# Each probe in the background: the partition lasts what it should.
# probe NAME CMD...: "SECONDS ok" or "SECONDS failed: ERROR" in $work/NAME.
probe() {
  local name=$1 start err
  shift
  start=$(now)
  if err=$(timeout 60 "$@" 2>&1 >/dev/null); then
    echo "$(elapsed "$start" "$(now)") s ok" >"$work/$name"
  else
    echo "$(elapsed "$start" "$(now)") s failed: ${err//$'\n'/ }" >"$work/$name"
  fi
}
probe follower_ls ls -R "$work/follower.mnt/p" &
probes=$!
probe follower_read cat "$work/follower.mnt/cached.bin" &
probes+=" $!"
probe cached_stat "${core1[@]}" stat "$w/cached.bin" &
probes+=" $!"
probe cached_read "${core1[@]}" cat "$w/cached.bin" &
probes+=" $!"
probe cached_read_same_core "${core0[@]}" cat "$w/cached.bin" &
probes+=" $!"
sleep "$((partition_s - 2))"
netns_heal
healed_at=$(now)
sleep 40
touch "$stop"
wait "$writer" || true
awk -v c="$cut_at" -v h="$healed_at" '
  { took = $3 - $2; if (took > longest) longest = took }
  $4 == "ok" && $3 < c { before++ }
  $4 == "ok" && $3 >= c && $3 < h { during++ }
  $4 == "ok" && $3 >= h { after++ }
  $4 != "ok" { failed++; if (!why) { why = $0 } }
  END {
    printf "partition of %d s under a writer fsyncing 100 KB files: %d fsyncs done before it, %d during, %d in the 40 s after; %d failed; the longest took %.1f s\n",
      h - c, before, during, after, failed, longest
    if (why) print "first failure: " why
  }' "$work/fsyncs"
# shellcheck disable=SC2086 # PIDs
wait $probes
echo "during it, 2 s in: the follower's ls -R $(cat "$work/follower_ls"); its read of a file $(cat "$work/follower_read");" \
  "on the partitioned client, of a file read before: a stat $(cat "$work/cached_stat"), a read $(cat "$work/cached_read")," \
  "a read from the core its writer runs on $(cat "$work/cached_read_same_core")"
umount_densefs "$work/follower.mnt"
umount_densefs "$w"
start=$(now)
in_ns "$densefs" mount "$work/part.store" "$w" || fail "remounting the writer failed"
echo "the writer remounted in $(elapsed "$start" "$(now)") s"
check_fsynced "$work/p" "$w/p" "$work/fsyncs"
umount_densefs "$w"
"$densefs" fsck "$work/part.store" >"$work/fsck.out" 2>&1 || {
  cat "$work/fsck.out" >&2
  fail "fsck after the partition failed"
}
echo "after it: all $fsynced_exact files whose fsync succeeded exact after a remount; fsck clean"
