#!/usr/bin/env bash
# -o metrics=ADDR:PORT (docs/metrics.md), scraped as a user's Prometheus
# would: a real Prometheus from Debian scrapes a mount while files are
# written and read, and its query API must see the bytes; `promtool check
# metrics` finds nothing to say about what the mount serves; a bad address
# and a port already taken are one-line errors that leave nothing mounted.
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"

prometheus=$(find_tool prometheus) || missing_tool "prometheus (Debian prometheus)"
promtool=$(find_tool promtool) || missing_tool "promtool (Debian prometheus)"
command -v curl >/dev/null || missing_tool "curl"
command -v jq >/dev/null || missing_tool "jq"

# A port no one listens on now (the kernel's pick, then let go).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

store=$work/store
mnt=$work/mnt
mkdir -p "$mnt"
"$densefs" mkfs "$store" >/dev/null || fail "densefs mkfs failed"


step "refused: an address without a port, a port that is taken"
expect_mount_refused "ADDR:PORT" "$store" "$mnt" -o metrics=localhost
taken=$(free_port)
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(60)' "$taken" &
holder=$!
listening() { bash -c "exec 3<>/dev/tcp/127.0.0.1/$taken" 2>/dev/null; }
eventually 10 "another program listens on port $taken" listening
expect_mount_refused "pick another PORT" "$store" "$mnt" -o "metrics=127.0.0.1:$taken"
kill "$holder"
wait "$holder" 2>/dev/null || true
! findmnt -n "$mnt" >/dev/null || fail "a refused mount left $mnt mounted"

step "mount with -o metrics=127.0.0.1:PORT"
port=$(free_port)
mount_densefs "$store" "$mnt" -o "metrics=127.0.0.1:$port"
url=http://127.0.0.1:$port/metrics
curl -sf "$url" >"$work/first.txt" || fail "GET $url failed"
grep -q '^# TYPE densefs_fuse_request_duration_seconds histogram$' "$work/first.txt" ||
  fail "no request latency histogram in $url"
[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/") == 404 ]] ||
  fail "GET / did not answer 404"

step "a real Prometheus scrapes it"
prom_port=$(free_port)
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: densefs
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
"$promtool" check config "$work/prometheus.yml" >/dev/null || fail "promtool check config failed"
"$prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prom_pid=$!
# mount_lib.sh's own exit trap (cleanup_work) still runs after this one.
trap 'kill "$prom_pid" 2>/dev/null || true; cleanup_work' EXIT
query() {
  curl -sf --get "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" |
    jq -r '.data.result[0].value[1] // empty'
}
scraped() { [[ $(query 'up{job="densefs"}') == 1 ]]; }
eventually 60 "Prometheus scraped the mount" scraped

# Real bytes through the mount, then what Prometheus sees of them.
data=$work/data
make_tree "$data" 4000000
cp -a "$data" "$mnt/data"
sync
check_tree "through the mount" "$data" "$mnt/data"
# The regular files' bytes; cp -a writes no hole of the sparse one.
written=$(find "$data" -type f ! -name sparse -printf '%s\n' | awk '{ s += $1 } END { print s }')
written_seen() {
  local v
  v=$(query 'densefs_written_bytes_total{job="densefs"}')
  [[ -n $v ]] && awk -v v="$v" -v w="$written" 'BEGIN { exit !(v + 0 >= w * 0.9) }'
}
eventually 30 "Prometheus sees the bytes written ($written)" written_seen
read_seen() { [[ -n $(query 'densefs_read_bytes_total{job="densefs"} > 0') ]]; }
eventually 30 "Prometheus sees bytes read" read_seen
creates=$(query 'sum(densefs_fuse_request_duration_seconds_count{job="densefs",kind="create"})')
if [[ -z $creates ]] || ((${creates%.*} == 0)); then
  fail "no create in the latency histogram: '$creates'"
fi
p99=$(query 'histogram_quantile(0.99, sum by (le) (rate(densefs_fuse_request_duration_seconds_bucket{job="densefs"}[1m])))')
echo "requests: creates $creates, p99 of all kinds ${p99:-?} s"

step "the Grafana dashboard's queries run on what Prometheus scraped"
# Every query of docs/grafana/densefs.json, with its variables as Grafana
# sets them: Prometheus must take each, and those of an embedded volume
# must find data (the scale-out panels have none here).
python3 - "$src/docs/grafana/densefs.json" "$prom_port" <<'EOF2'
import json
import sys
import urllib.parse
import urllib.request

board = json.load(open(sys.argv[1]))
port = sys.argv[2]
empty = []
total = 0
for panel in board["panels"]:
    for target in panel.get("targets", []):
        expr = target["expr"].replace("$instance", ".*").replace("$__rate_interval", "1m")
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            answer = json.load(urllib.request.urlopen(url, timeout=10))
        except Exception as e:
            sys.exit(f"FAIL: Prometheus refused the query of panel {panel['title']!r}: {expr}: {e}")
        if answer.get("status") != "success":
            sys.exit(f"FAIL: panel {panel['title']!r}: {expr}: {answer}")
        total += 1
        scale_out = any(n in expr for n in ("densefs_object_", "densefs_payload_cache", "densefs_metadata_round_trips"))
        if not answer["data"]["result"] and not scale_out:
            empty.append(f"{panel['title']}: {expr}")
# A rate over a minute can be empty when nothing happened in it (the gc
# hourly increase, a cache nobody read): a few may be.
if len(empty) > 3:
    sys.exit("FAIL: dashboard queries without data:\n" + "\n".join(empty))
print(f"{total} dashboard queries taken, {len(empty)} without data")
EOF2

step "promtool check metrics"
curl -sf "$url" >"$work/metrics.txt" || fail "GET $url failed"
if ! "$promtool" check metrics <"$work/metrics.txt" >"$work/promtool.out" 2>&1; then
  cat "$work/promtool.out" >&2
  fail "promtool check metrics found problems (above)"
fi
[[ ! -s $work/promtool.out ]] || {
  cat "$work/promtool.out" >&2
  fail "promtool check metrics printed lint (above)"
}
for family in densefs_fuse_requests_total densefs_written_bytes_total densefs_read_bytes_total \
  densefs_logical_bytes densefs_stored_bytes densefs_codec_stored_bytes densefs_dedup_saved_bytes \
  densefs_recompress_backlog_chunks densefs_group_commit_duration_seconds \
  densefs_group_commit_slots_total densefs_staged_bytes densefs_chunk_cache_reads_total \
  densefs_gc_runs_total densefs_gc_reclaimed_bytes_total densefs_gc_garbage_bytes; do
  grep -q "^# TYPE $family " "$work/metrics.txt" || fail "no $family in $url"
done
echo "$(grep -vc '^#' "$work/metrics.txt") samples, $(grep -c '^# TYPE' "$work/metrics.txt") families"

step "group commits, the chunk cache and gc counted"
# The value of one sample (name and labels as served), 0 when absent.
sample() { awk -v k="$1" '$1 == k { v = $2 } END { print v + 0 }' "$work/metrics.txt"; }
(($(sample 'densefs_group_commit_duration_seconds_count') > 0)) || fail "no group commit counted"
(($(sample 'densefs_group_commit_slots_total') >= $(sample 'densefs_group_commit_duration_seconds_count'))) ||
  fail "fewer slots than group commits"
# A read the kernel no longer caches reaches the daemon, whose chunk cache
# answers it or loads the chunk.
sync
echo 3 >/proc/sys/vm/drop_caches
cat "$mnt"/data/* >/dev/null 2>&1 || true
rm -rf "$mnt/data"
sync
"$densefs" gc "$store" >/dev/null || fail "densefs gc of the mounted store failed"
curl -sf "$url" >"$work/metrics.txt" || fail "GET $url failed"
reads=$(($(sample 'densefs_chunk_cache_reads_total{result="hit"}') + $(sample 'densefs_chunk_cache_reads_total{result="miss"}')))
((reads > 0)) || fail "no chunk cache read counted"
(($(sample 'densefs_gc_runs_total') >= 1)) || fail "the gc run is not counted"
echo "chunk cache reads $reads; gc gave back $(sample 'densefs_gc_reclaimed_bytes_total') bytes"

umount_densefs "$mnt"
! curl -s --max-time 2 "$url" >/dev/null || fail "the metrics port still answers after unmount"
echo "PASS: metrics"
