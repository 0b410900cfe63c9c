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
size_mb=${SIZE_MB:-400}
rounds=${ROUNDS:-3}
# Shared libraries (*.so* under a lib directory) fill what the docs leave.
read -r -a sources <<<"${SOURCES:-/usr/share/doc /usr/share/man /usr/lib/x86_64-linux-gnu}"
mkdir -p "$work"

echo "== building the helper"
cmake --build "$build" --target densefs_cdc_bench >/dev/null
bench=$build/tests/bench/densefs_cdc_bench

if [[ ! -f $work/v2.tar ]]; then
  echo "== building v1.tar (~$size_mb MB) and v2.tar in $work"
  rm -rf "$work/stage" && mkdir -p "$work/stage"
  # Regular files, each source in name order, until the size is reached;
  # one name per inode (hard links would shrink the tar and hide the content).
  for src in "${sources[@]}"; do
    find "$src" -type f -name "$([[ $src == */lib/* ]] && echo '*.so*' || echo '*')" \
      -printf '%p\t%s\t%D:%i\n' 2>/dev/null | LC_ALL=C sort
  done | awk -F'\t' -v limit=$((size_mb * 1000000)) '
      seen[$3]++ { next }
      total + $2 > limit { next }
      { total += $2; sub(/^\//, "", $1); print $1 "\t" $2 }' >"$work/files.tsv"
  cut -f1 "$work/files.tsv" >"$work/files.txt"
  tar -C / -cf - --no-recursion -T "$work/files.txt" | tar -C "$work/stage" -xf -
  tar -C "$work/stage" --sort=name -cf "$work/v1.tar" .
  # Change every 100th file of at least 128 bytes: 64 random bytes in the middle.
  changed=0
  while IFS=$'\t' read -r f size; do
    ((size >= 128)) || continue
    changed=$((changed + 1))
    ((changed % 100 == 0)) || continue
    head -c 64 /dev/urandom |
      dd of="$work/stage/$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
  done <"$work/files.tsv"
  tar -C "$work/stage" --sort=name -cf "$work/v2-plain.tar" .
  {
    head -c 5000 "$work/v2-plain.tar"
    head -c 1000 /dev/urandom
    tail -c +5001 "$work/v2-plain.tar"
  } >"$work/v2.tar"
  rm -rf "$work/stage" "$work/v2-plain.tar"
  echo "files: $(wc -l <"$work/files.txt"), changed: $((changed / 100))"
fi

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
