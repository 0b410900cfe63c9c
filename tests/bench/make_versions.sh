#!/usr/bin/env bash
# Builds the two versions of a tar of real files that the dedup benchmarks
# store (cdc_bench.sh, dedup_bench.sh), unless WORK_DIR already has them:
#   v1.tar: ~SIZE_MB MB of regular files (/usr/share/doc, /usr/share/man,
#           then shared libraries), one name per inode, in name order;
#   v2.tar: the same tar with every 100th file of at least 128 bytes given 64
#           random bytes in the middle, and 1000 random bytes inserted at
#           offset 5000 (everything after it shifts).
# Usage: tests/bench/make_versions.sh WORK_DIR
#   env: SIZE_MB (default 400), SOURCES (directories, space-separated)
set -euo pipefail
work=$1
size_mb=${SIZE_MB:-400}
# Shared libraries (*.so* under a lib directory) fill what the docs leave.
read -r -a sources <<<"${SOURCES:-/usr/share/doc /usr/share/man /usr/lib/x86_64-linux-gnu}"
mkdir -p "$work"

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

