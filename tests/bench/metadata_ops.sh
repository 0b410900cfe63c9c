#!/usr/bin/env bash
# Metadata operations per second through a mount, the embedded store against
# a store with its records in PostgreSQL (docs/scale-out.md), side by side in
# one run: create, stat, rename, unlink and mkdir/rmdir of N entries, each
# workload run on both mounts in turn, ROUNDS times, the median kept. The
# mounts have every kernel cache timeout at 0, so each stat reaches the
# daemon (and with PostgreSQL, the server). The PostgreSQL server is private
# (tests/mount/postgres_lib.sh: a unix socket, fsync off), so a commit
# costs a round trip, not a disk flush. Not a test: a measurement; needs
# root and /dev/fuse.
# With DENSEFS_BENCH_SHARED=1 two more mounts join the run, both on
# volumes with packs in a private radosgw (tests/mount/s3_lib.sh): one
# written alone and one mounted `-o shared` (a writer beside others,
# docs/scale-out.md, "Several writers"), so the price of taking the lock
# and reading records inside each commit shows as a ratio.
# Usage: tests/bench/metadata_ops.sh [path/to/densefs] [N] [ROUNDS]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
n=${2:-2000}
rounds=${3:-5}
# shellcheck source=../mount/mount_lib.sh
source "$repo/tests/mount/mount_lib.sh" "${1:-$repo/build/tools/densefs}" "$repo"
# shellcheck source=../mount/postgres_lib.sh
source "$repo/tests/mount/postgres_lib.sh"

timeouts=entry_timeout=0,attr_timeout=0,negative_timeout=0
mkdir -p "$work/rocksdb.mnt" "$work/postgresql.mnt"
"$densefs" mkfs "$work/rocksdb.store" >/dev/null
pg_createdb bench
"$densefs" mkfs --meta "$(pg_conninfo bench)" "$work/postgresql.store" >/dev/null
mount_densefs "$work/rocksdb.store" "$work/rocksdb.mnt" -o "$timeouts"
mount_densefs "$work/postgresql.store" "$work/postgresql.mnt" -o "$timeouts"
engines="rocksdb postgresql"
if [[ ${DENSEFS_BENCH_SHARED:-0} == 1 ]]; then
  # shellcheck source=../mount/s3_lib.sh
  source "$repo/tests/mount/s3_lib.sh"
  for e in alone shared; do
    pg_createdb "bench_$e"
    "$densefs" mkfs --meta "$(pg_conninfo "bench_$e")" \
      --data "s3://densefs-bench/$e?endpoint=$S3_ENDPOINT" "$work/$e.store" >/dev/null
    mkdir -p "$work/$e.mnt"
  done
  mount_densefs "$work/alone.store" "$work/alone.mnt" -o "$timeouts"
  mount_densefs "$work/shared.store" "$work/shared.mnt" -o "$timeouts,shared"
  engines="$engines alone shared"
fi

python3 - "$work" "$n" "$rounds" "$engines" <<'EOF'
import os, statistics, sys, time

work, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
engines = sys.argv[4].split()


def run(mnt, r):
    d = f"{mnt}/r{r}"
    os.mkdir(d)
    names = [f"{d}/file-{i:06d}" for i in range(n)]
    moved = [f"{d}/moved-{i:06d}" for i in range(n)]
    dirs = [f"{d}/dir-{i:06d}" for i in range(n)]
    out = {}

    def timed(label, fn, items):
        t = time.perf_counter()
        for x in items:
            fn(x)
        out[label] = (time.perf_counter() - t) / len(items) * 1e6

    timed("create", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)), names)
    timed("stat", os.stat, names)
    timed("rename", lambda i: os.rename(names[i], moved[i]), range(n))
    timed("unlink", os.unlink, moved)
    timed("mkdir", os.mkdir, dirs)
    timed("rmdir", os.rmdir, dirs)
    os.rmdir(d)
    return out


results = {e: [] for e in engines}
for r in range(rounds):
    for e in engines if r % 2 == 0 else reversed(engines):
        results[e].append(run(f"{work}/{e}.mnt", r))

print(f"{n} entries, {rounds} rounds (median), microseconds per operation through the mount")
shared = "shared" in engines
head = f"{'op':8} {'rocksdb':>10} {'postgresql':>11} {'pg/rocksdb':>11} {'pg ops/s':>9}"
if shared:
    head += f" {'pg+s3 alone':>12} {'-o shared':>10} {'shared/alone':>13} {'shared ops/s':>13}"
print(head)
for op in results["rocksdb"][0]:
    m = {e: statistics.median(x[op] for x in results[e]) for e in engines}
    line = f"{op:8} {m['rocksdb']:10.1f} {m['postgresql']:11.1f} {m['postgresql'] / m['rocksdb']:10.2f}x {1e6 / m['postgresql']:9.0f}"
    if shared:
        line += f" {m['alone']:12.1f} {m['shared']:10.1f} {m['shared'] / m['alone']:12.2f}x {1e6 / m['shared']:13.0f}"
    print(line)
EOF
