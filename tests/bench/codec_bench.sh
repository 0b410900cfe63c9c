#!/usr/bin/env bash
# Codec benchmark (not a test; the machines are shared, so compare the
# columns of one run, not runs with each other). Side by side, same thread
# count:
#   - Lepton through densefs' codec API (encode_chunk with verify, and
#     decode_chunk) vs lepton_jpeg called directly (encode + decode + compare,
#     and decode), on the JPEGs Lepton takes from ../shared/corpus/jpeg;
#     target: ours >= 0.9x of direct;
#   - Broccoli at the default options (quality 5, window 22) in 4 MiB chunks
#     vs `brotli -q 5 -w 22` on a tar of /usr/share/doc; target: ratio within 2%;
#   - the joined Broccoli chunks (concat_broccoli) decode with stock brotli.
# Usage: tests/bench/codec_bench.sh [BUILD_DIR] [WORK_DIR]
#   env: THREADS (default 1), ROUNDS (default 3), CORPUS, DOC_DIR, CARGO
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
work=${2:-/var/tmp/densefs-codec-bench}
threads=${THREADS:-1}
rounds=${ROUNDS:-3}
corpus=${CORPUS:-$repo/../shared/corpus/jpeg}
doc_dir=${DOC_DIR:-/usr/share/doc}
cargo=${CARGO:-$(grep -m1 '^DENSEFS_CARGO:' "$build/CMakeCache.txt" | cut -d= -f2-)}
mkdir -p "$work"

echo "== building the helpers"
cmake --build "$build" --target densefs_codec >/dev/null
c++ -O2 -std=c++20 -I"$repo" "$repo/tests/bench/codec_bench.cpp" \
  "$build/codec/libdensefs_codec.a" "$build/codec/cargo/release/libdensefs_codec_rs.a" \
  -lzstd -lxxhash -lpthread -ldl -lm -lrt -lutil -o "$work/codec_bench"
"$cargo" build --release --locked --quiet --example lepton_direct \
  --manifest-path "$repo/codec/rust/Cargo.toml" --target-dir "$build/codec/cargo"
direct=$build/codec/cargo/release/examples/lepton_direct

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", b / s / 1e6 }'; }

echo "== lepton: $corpus, threads=$threads, best of $rounds rounds"
mapfile -t jpegs < <(find "$corpus" -maxdepth 1 -type f | sort)
read -r ours_bytes ours_enc ours_dec < <("$work/codec_bench" lepton "$threads" "$rounds" \
  "$work/accepted.txt" "${jpegs[@]}")
mapfile -t accepted <"$work/accepted.txt"
read -r direct_bytes direct_enc direct_dec < <("$direct" "$threads" "$rounds" "${accepted[@]}")
[[ $ours_bytes == "$direct_bytes" ]] || { echo "byte counts differ" >&2; exit 1; }
echo "files: ${#accepted[@]} of ${#jpegs[@]} taken by Lepton, $ours_bytes bytes"
printf '%-34s %10s %10s\n' "(per CPU second)" "densefs" "direct"
printf '%-34s %10s %10s   ours/direct %s\n' "encode + verify MB/s" \
  "$(mbps "$ours_bytes" "$ours_enc")" "$(mbps "$direct_bytes" "$direct_enc")" \
  "$(ratio "$direct_enc" "$ours_enc")"
printf '%-34s %10s %10s   ours/direct %s\n' "decode MB/s" \
  "$(mbps "$ours_bytes" "$ours_dec")" "$(mbps "$direct_bytes" "$direct_dec")" \
  "$(ratio "$direct_dec" "$ours_dec")"

echo "== broccoli: tar of $doc_dir"
tar_file=$work/doc.tar
[[ -f $tar_file ]] || tar -cf "$tar_file" -C "$(dirname "$doc_dir")" "$(basename "$doc_dir")" 2>/dev/null || true
read -r plain stored enc dec < <("$work/codec_bench" broccoli "$tar_file" "$work/joined.br")
start=$(date +%s.%N)
brotli -q 5 -w 22 -f -c "$tar_file" >"$work/doc.tar.br"
end=$(date +%s.%N)
stock=$(stat -c %s "$work/doc.tar.br")
printf 'plain %d bytes\n' "$plain"
printf 'broccoli q5 w22, 4 MiB chunks: %d bytes, ratio %s, encode %s MB/s, decode %s MB/s\n' \
  "$stored" "$(ratio "$plain" "$stored")" "$(mbps "$plain" "$enc")" "$(mbps "$plain" "$dec")"
printf 'brotli -q 5 -w 22, one stream:  %d bytes, ratio %s, encode %s MB/s\n' \
  "$stock" "$(ratio "$plain" "$stock")" "$(mbps "$plain" "$(echo "$end - $start" | bc)")"
# The same 4 MiB chunks through stock brotli: what chunking alone costs
# (the rest is the static dictionary, which catable streams cannot use).
rm -rf "$work/pieces" && mkdir -p "$work/pieces"
split -b 4M -a 4 "$tar_file" "$work/pieces/p"
chunked=0
for p in "$work/pieces"/p*; do
  chunked=$((chunked + $(brotli -q 5 -w 22 -c "$p" | wc -c)))
done
rm -rf "$work/pieces"
printf 'brotli -q 5 -w 22, 4 MiB chunks: %d bytes, ratio %s\n' "$chunked" "$(ratio "$plain" "$chunked")"
printf 'broccoli size / brotli size: %s (one stream), %s (same 4 MiB chunks)\n' \
  "$(ratio "$stored" "$stock")" "$(ratio "$stored" "$chunked")"

echo "== concat_broccoli output through stock brotli -d"
brotli -d -f -c "$work/joined.br" | cmp - "$tar_file" && echo "joined stream decodes to the tar: OK"
