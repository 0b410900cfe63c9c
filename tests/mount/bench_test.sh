#!/usr/bin/env bash
# densefs bench against a plain directory and a densefs mount (the harness's
# functional test; speed itself belongs in the bench, not here):
#   - --prepare builds a tiny input (a capped copy of /usr/share/doc, a 4 MiB
#     big file, a few JPEGs of the corpus);
#   - every workload runs warm on both targets and the table has a time, a
#     rate and a ratio for the densefs column on every row, and the space
#     table a "densefs stored" column read from densefs stats;
#   - --json has the same rows, without errors;
#   - a cold walk (caches dropped: this runs as root) gives cold rows;
#   - JPEGs are read as finally stored (after densefs' background Lepton
#     pass) and compared with the Lepton library's own decode rate;
#   - the space table has a row per input and kind, and a total per input;
#   - the work directories are removed from both targets, also when the run
#     is interrupted (SIGINT: exit status 130).
# usage: bench_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"

command -v python3 >/dev/null || missing_tool python3
data=${DENSEFS_BENCH_SOURCE:-/usr/share/doc}
[[ -d $data ]] || unavailable "$data does not exist"
jpeg=${DENSEFS_CORPUS_DIR:-$src/../shared/corpus}/jpeg

input=$work/input
plain=$work/plain
store=$work/store
mnt=$work/mnt
mkdir -p "$plain" "$mnt"
"$densefs" mkfs "$store" >/dev/null || fail "densefs mkfs failed"
mount_densefs "$store" "$mnt"

start=$(now)
"$densefs" bench --prepare "$input" --size 2M --big-size 4M --source "$data" \
  --big-source "$data" --jpeg "$jpeg" || fail "densefs bench --prepare failed"

targets=(--target "plain=$plain" --target "densefs=$mnt")
table=$work/table.txt
"$densefs" bench --input "$input" "${targets[@]}" --warm-only --procs 1,2 \
  --svg "$work/chart.svg" >"$table" || fail "densefs bench failed: $(cat "$table")"
cat "$table"

# The header names both targets, the densefs column with its ratio.
head -1 "$table" | grep -Eq '^workload +cache +procs +plain +rate +densefs +rate +vs plain$' ||
  fail "unexpected table header: $(head -1 "$table")"
rows=0
for row in "walk warm 1" "walk warm 2" "read-small warm 1" "read-small warm 2" \
  "read-jpeg warm 1" "read-large warm 1" "write-big - 1" "write-cp - 1" "write-rsync - 1"; do
  [[ $row == write-rsync* ]] && ! command -v rsync >/dev/null && continue
  read -r w c p <<<"$row"
  grep -Eq "^$w +$c +$p +[0-9.]+ s +[0-9.]+.*/s +[0-9.]+ s +[0-9.]+.*/s +[0-9.]+x$" "$table" ||
    fail "no complete '$row' row for both targets"
  rows=$((rows + 1))
done
# The tree and the JPEGs were re-encoded and collected before their reads.
if grep -q "not settled" "$table"; then fail "$(grep "not settled" "$table")"; fi
grep -Eq '^space +files +logical +plain used +plain alloc +densefs used +densefs alloc +densefs stored$' \
  "$table" || fail "space table lacks the densefs stored column"
grep -Eq '^jpeg jpeg +[0-9]+ ' "$table" || fail "space table has no 'jpeg jpeg' row"
grep -Eq '^tree \(all\) +[0-9]+ ' "$table" || fail "space table has no total for the tree"
grep -Eq '^reference: lepton-decode \(library, [0-9]+ procs\): [0-9.]+ s, [0-9.]+ MiB/s over [1-9][0-9]* files' \
  "$table" || fail "no Lepton library reference line"
python3 -c 'import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); assert d.documentElement.tagName == "svg"; assert len(d.getElementsByTagName("rect")) >= 3 + 2 * 9' \
  "$work/chart.svg" || fail "the SVG chart is not a well-formed SVG document with a bar per cell"

# JSON and a cold run: caches are dropped before each cold walk.
"$densefs" bench --input "$input" "${targets[@]}" --workloads walk,space --procs 1 --json \
  >"$work/bench.json" || fail "densefs bench --json failed"
python3 - "$work/bench.json" <<'PY' || fail "unexpected JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["targets"] == ["plain", "densefs"], j["targets"]
assert j["cold"] is True, j.get("cold_note")
cells = {(r["workload"], r["cache"], r["procs"], r["target"]) for r in j["results"]}
for t in ("plain", "densefs"):
    for cache in ("warm", "cold"):
        assert ("walk", cache, 1, t) in cells, (cache, t, cells)
# The daemon's own caches were dropped before each cold row, without a note.
assert not any(n.startswith("cold rows on") for n in j["notes"]), j["notes"]
for r in j["results"]:
    assert r["available"] and r["errors"] == 0 and r["failed_workers"] == 0, r
    assert r["entries"] > 0, r
walks = {(r["cache"], r["target"]): r["entries"] for r in j["results"]}
assert len(set(walks.values())) == 1, walks  # the same tree on both targets
stored = [s for s in j["space"] if s["target"] == "densefs"]
assert stored and all("densefs_stored_bytes" in s for s in stored), stored
assert not any("densefs_stored_bytes" in s for s in j["space"] if s["target"] == "plain")
print("json ok:", len(j["results"]), "results,", len(j["space"]), "space rows")
PY

leftover=$(find "$plain" "$mnt" -mindepth 1 -maxdepth 1 -name 'densefs-bench.*' | wc -l)
[[ $leftover -eq 0 ]] || fail "work directories left on the targets"

# Interrupted once its work directories exist: exit 130, nothing left.
"$densefs" bench --input "$input" "${targets[@]}" --warm-only --procs 1 --workloads write,walk \
  >/dev/null 2>"$work/interrupted.err" &
bench_pid=$!
for _ in $(seq 1 200); do
  [[ -d $mnt/densefs-bench.$bench_pid ]] && break
  sleep 0.05
done
[[ -d $mnt/densefs-bench.$bench_pid ]] || fail "the bench never made its work directory"
kill -INT "$bench_pid"
status=0
wait "$bench_pid" || status=$?
[[ $status -eq 130 ]] || fail "interrupted bench exited $status, not 130: $(cat "$work/interrupted.err")"
grep -q 'interrupted by Interrupt; work directories removed' "$work/interrupted.err" ||
  fail "no message on interrupt: $(cat "$work/interrupted.err")"
leftover=$(find "$plain" "$mnt" -mindepth 1 -maxdepth 1 -name 'densefs-bench.*' | wc -l)
[[ $leftover -eq 0 ]] || fail "work directories left after an interrupt"
umount_densefs "$mnt"
echo "COUNTS: bench targets=2 rows=$rows cold=yes seconds=$(elapsed "$start" "$(now)")"
