#!/usr/bin/env bash
# Content-defined chunking benchmark (not a test; the machines are shared, so
# compare the rows of one run, not runs with each other):
#   1. chunking and SHA-256 throughput, one thread, over a tar of real files;
#   2. the FIELD-NOTES dedup experiment: v1 = a ~400 MB tar of real files
#      (/usr/share/doc, /usr/share/man, shared libraries), v2 = the same tar
#      with ~1% of the member files changed and 1000 bytes inserted at offset
#      5000. Per chunker: new bytes to store v2 after v1, chunk counts, and
#      the zstd -3 ratio of the unique chunks, each compressed on its own.
# Usage: tests/bench/cdc_bench.sh [BUILD_DIR] [WORK_DIR]
#   env: SIZE_MB (default 400), ROUNDS (default 3), SOURCES (directories,
#   space-separated; default /usr/share/doc /usr/share/man /usr/lib/x86_64-linux-gnu)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
work=${2:-/var/tmp/densefs-cdc-bench}
rounds=${ROUNDS:-3}
mkdir -p "$work"

echo "== building the helper"
cmake --build "$build" --target densefs_cdc_bench >/dev/null
bench=$build/tests/bench/densefs_cdc_bench

"$repo/tests/bench/make_versions.sh" "$work"

echo "== throughput over v1.tar, best of $rounds rounds"
"$bench" speed "$work/v1.tar" "$rounds"

echo "== dedup: store v1, then v2 (v2 new% = new plain bytes v2 needed, of v2)"
echo "   meta% = 100 bytes per unique chunk and per chunk reference, of the stored bytes;"
echo "   v1 total% = zstd -3 unique chunks + meta after v1, of v1;"
echo "   total% = zstd -3 unique chunks + meta after v1 and v2, of v1 + v2"
configs=()
for avg in 8 16 32 64 128; do
  configs+=("cdc:min=$((avg / 4))K:avg=${avg}K:max=$((avg * 4))K")
done
configs+=("fixed:4M")
"$bench" dedup "$work/v1.tar" "$work/v2.tar" "${configs[@]}"
