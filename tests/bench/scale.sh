#!/usr/bin/env bash
# The cost per file as the volume grows: creates N empty files (half in
# directories of 1,000, half in one directory), lists the big directory
# cold, walks everything cold (an lstat of each entry) and removes it all
# with rm -rf, on an ext4 directory and on a fresh densefs mount side by
# side, for each N; prints seconds, microseconds per file, the ratio to
# ext4, and the daemon's RSS after the creates and after the walk with
# its growth per inode the kernel then remembers (docs/bench.md, "Cost per
# file"). Cold: caches dropped, and densefs remounted (a fresh daemon).
# Not a test: 100k and 1M take about 15 minutes on the 2-core VM; run it
# with nothing else on the machine. Needs root.
# Usage: tests/bench/scale.sh [path/to/densefs] [WORK_DIR] [N ...]
#        (default N: 100000 1000000)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
densefs=$(realpath "${1:-$repo/build/tools/densefs}")
work=${2:-/var/tmp/densefs-scale}
shift $(($# > 2 ? 2 : $#))
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(100000 1000000)
steps=$repo/tests/bench/scale_files.py
store=$work/store
mnt=$work/mnt

cleanup() {
  if mountpoint -q "$mnt" 2>/dev/null; then "$densefs" umount "$mnt" || true; fi
}
trap cleanup EXIT

drop() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}
rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$(pgrep -f "densefs mount $store" | head -n 1)/status"; }
remount() {
  "$densefs" umount "$mnt"
  drop
  "$densefs" mount "$store" "$mnt"
}
# step TARGET STEP ARGS...: runs one step, prints its line with the target
step() {
  local target=$1
  shift
  echo "$target $(python3 "$steps" "$@")"
}

cleanup
rm -rf "$work" && mkdir -p "$work/ext4" "$mnt"
results=$work/results.txt
: >"$results"
for n in "${sizes[@]}"; do
  # ext4
  root=$work/ext4/tree
  step ext4 create "$root" "$n" | tee -a "$results"
  drop
  step ext4 list "$root" | tee -a "$results"
  drop
  step ext4 walk "$root" | tee -a "$results"
  step ext4 remove "$root" | tee -a "$results"
  sync

  # densefs: a fresh store for each N
  rm -rf "$store"
  "$densefs" mkfs "$store" >/dev/null
  "$densefs" mount "$store" "$mnt"
  root=$mnt/tree
  step densefs create "$root" "$n" | tee -a "$results"
  echo "densefs rss-created $(rss_kib)" | tee -a "$results"
  remount
  step densefs list "$root" | tee -a "$results"
  remount
  echo "densefs rss-mounted $(rss_kib)" | tee -a "$results"
  step densefs walk "$root" | tee -a "$results"
  echo "densefs rss-walked $(rss_kib)" | tee -a "$results"
  step densefs remove "$root" | tee -a "$results"
  "$densefs" umount "$mnt"
  echo "n $n" >>"$results"
done

# The table: one row per N and step, ext4 and densefs side by side.
python3 - "$results" <<'PY'
import sys
rows, rss, order = {}, {}, []
n = None
pending = []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "n":
        for target, step, seconds, entries in pending:
            rows[(int(f[1]), target, step)] = (seconds, entries)
        for k in list(rss):
            if k[0] is None:
                rss[(int(f[1]), k[1])] = rss.pop(k)
        order.append(int(f[1]))
        pending = []
    elif f[1].startswith("rss-"):
        rss[(None, f[1])] = int(f[2])
    else:
        pending.append((f[0], f[1], float(f[2]), int(f[3])))
print(f"{'N':>9} {'step':8} {'ext4 s':>9} {'us/file':>8} {'densefs s':>10} {'us/file':>8} {'/ ext4':>7}")
for n in order:
    for step in ("create", "list", "walk", "remove"):
        e, d = rows.get((n, "ext4", step)), rows.get((n, "densefs", step))
        if not e or not d:
            continue
        per = n if step in ("create", "remove") else max(d[1], 1)
        print(f"{n:>9} {step:8} {e[0]:>9.2f} {1e6 * e[0] / per:>8.1f} {d[0]:>10.2f} "
              f"{1e6 * d[0] / per:>8.1f} {d[0] / e[0]:>6.2f}x")
    walked = rows.get((n, "densefs", "walk"), (0, 0))[1]
    grown = rss.get((n, "rss-walked"), 0) - rss.get((n, "rss-mounted"), 0)
    print(f"{n:>9} daemon RSS: {rss.get((n, 'rss-created'), 0) / 1024:.0f} MiB after the "
          f"creates, {rss.get((n, 'rss-walked'), 0) / 1024:.0f} MiB after the walk "
          f"({1024 * grown / max(walked, 1):.0f} B per inode the kernel remembers)")
PY
