#!/usr/bin/env bash
# Lepton on JPEGs larger than one chunk (not a test; the machines are shared,
# so compare the columns of one run). For each JPEG: bytes stored per 4 MiB
# chunk as densefs does today (Lepton only on a chunk it takes: the first),
# with one Lepton file per JPEG (codec/lepton_file.h, header and member
# payloads included), and by lepton_jpeg alone on the whole file; then the
# CPU time of one decode of each Lepton file (a cold read of any chunk)
# against lepton_jpeg's own decode (codec/rust/examples/lepton_direct).
# Usage: tests/bench/lepton_file_bench.sh [BUILD_DIR] [WORK_DIR] JPEG...
#   default JPEGs: those over 4 MiB under /usr/share/backgrounds and
#   /usr/share/wallpapers (install e.g. mate-backgrounds,
#   plasma-workspace-wallpapers) and ../shared/corpus/jpeg.
#   env: CARGO
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
work=${2:-/var/tmp/densefs-lepton-file-bench}
shift 2 2>/dev/null || shift $#
cargo=${CARGO:-$(grep -m1 '^DENSEFS_CARGO:' "$build/CMakeCache.txt" | cut -d= -f2-)}
mkdir -p "$work"

jpegs=("$@")
if [[ ${#jpegs[@]} -eq 0 ]]; then
  mapfile -t jpegs < <(find /usr/share/backgrounds /usr/share/wallpapers \
    "$repo/../shared/corpus/jpeg" -type f -iname '*.jp*g' -size +4M 2>/dev/null | sort)
fi
[[ ${#jpegs[@]} -gt 0 ]] || {
  echo "no JPEGs over 4 MiB found; name some" >&2
  exit 1
}

echo "== building the helpers"
cmake --build "$build" --target densefs_codec >/dev/null
c++ -O2 -std=c++20 -I"$repo" "$repo/tests/bench/lepton_file_bench.cpp" \
  "$build/codec/libdensefs_codec.a" "$build/codec/cargo/release/libdensefs_codec_rs.a" \
  -lzstd -lxxhash -lcrypto -lpthread -ldl -lm -lrt -lutil -o "$work/lepton_file_bench"
"$cargo" build --release --locked --quiet --example lepton_direct \
  --manifest-path "$repo/codec/rust/Cargo.toml" --target-dir "$build/codec/cargo"
direct=$build/codec/cargo/release/examples/lepton_direct

pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f%%", 100 * (1 - a / b) }'; }

echo "== ${#jpegs[@]} JPEGs (name plain per_chunk lepton_file lepton_only decode_cpu_s)"
"$work/lepton_file_bench" "${jpegs[@]}" | tee "$work/sizes.txt"
read -r _ plain per_chunk as_file lepton_only ours_dec < <(grep '^TOTAL' "$work/sizes.txt")
# lepton_jpeg direct on the JPEGs of several chunks it takes (it stops at a
# refusal): the ones whose Lepton file was timed.
mapfile -t timed < <(awk '$1 != "TOTAL" && $6 > 0 { print $1 }' "$work/sizes.txt")
read -r timed_plain _ direct_dec < <("$direct" 1 1 "${timed[@]}")
echo "saved per chunk (today):        $(pct "$per_chunk" "$plain")"
echo "saved as one Lepton file:       $(pct "$as_file" "$plain")"
echo "saved by lepton_jpeg alone:     $(pct "$lepton_only" "$plain")"
awk -v p="$timed_plain" -v o="$ours_dec" -v d="$direct_dec" 'BEGIN {
  printf "decode CPU s: lepton file %.2f (%.2f MB/s), lepton_jpeg %.2f (%.2f MB/s), ratio %.2fx\n",
    o, p / o / 1e6, d, p / d / 1e6, o / d }'
