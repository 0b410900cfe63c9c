#!/usr/bin/env bash
# cargo-fuzz targets for codec/rust's C ABI (tests/fuzz/rust), under ctest
# (label fuzz). Builds them (ASan, coverage of lepton_jpeg and brotli too),
# replays the checked-in corpus and crashers, then fuzzes each target for
# SECONDS from a temp copy of its corpus (findings stay in the temp dir).
#
#   cargo_fuzz_test.sh SOURCE_DIR TARGET_DIR SECONDS
#
# Exit 77 (skip) without cargo-fuzz or a toolchain that takes -Z flags.
# Prints per target: COUNTS: cargo_fuzz target=NAME executions=N crashes=C
set -u
src=$(realpath "$1") target_dir=$2 seconds=$3
fuzz_dir=$src/tests/fuzz/rust
targets=(lepton_decode lepton_roundtrip broccoli_decode broccoli_roundtrip deflate_decode deflate_roundtrip)

cargo=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
if ! "$cargo" fuzz --version >/dev/null 2>&1; then
  # Asked for with DENSEFS_REQUIRE_TOOLS=1, a missing tool fails rather than
  # letting a soak run go green by skipping.
  if [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]]; then
    echo "FAIL: cargo-fuzz is not installed (cargo install cargo-fuzz --locked)"
    exit 1
  fi
  echo "SKIP: cargo-fuzz missing (cargo install cargo-fuzz --locked; rustup toolchain install nightly)"
  exit 77
fi
# cargo-fuzz passes -Z flags: a nightly toolchain, else stable told to allow them.
toolchain=()
if "$cargo" +nightly --version >/dev/null 2>&1; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi

cd "$src" || exit 1
mkdir -p "$target_dir"
start=$(date +%s)
if ! nice "$cargo" "${toolchain[@]}" fuzz build --fuzz-dir "$fuzz_dir" --target-dir "$target_dir" \
  >"$target_dir/build.log" 2>&1; then
  tail -n 40 "$target_dir/build.log"
  echo "cargo fuzz build failed"
  exit 1
fi
echo "cargo fuzz build: $(($(date +%s) - start)) s"
bin_dir=$(dirname "$(find "$target_dir" -path '*/release/lepton_decode' -type f | head -n 1)")

failed=0
for t in "${targets[@]}"; do
  corpus=$src/tests/fuzz/corpus/rust_$t
  crashers=$src/tests/fuzz/crashers/rust_$t
  inputs=()
  for d in "$corpus" "$crashers"; do
    [[ -d $d ]] || continue
    while IFS= read -r -d '' f; do inputs+=("$f"); done \
      < <(find "$d" -type f ! -name 'README*' -print0 | sort -z)
  done
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/densefs-cargo-fuzz-$t.XXXXXX")
  mkdir "$tmp/corpus" "$tmp/artifacts"
  replay=0
  if ((${#inputs[@]} > 0)) && ! "$bin_dir/$t" -rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=20 "${inputs[@]}" >"$tmp/replay.log" 2>&1; then
    replay=1
    tail -n 40 "$tmp/replay.log"
  fi
  [[ -d $corpus ]] && cp -r "$corpus/." "$tmp/corpus/"
  dict=()
  [[ -f $src/tests/fuzz/dict/rust_$t.dict ]] && dict=(-dict="$src/tests/fuzz/dict/rust_$t.dict")
  "$bin_dir/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=256 \
    -artifact_prefix="$tmp/artifacts/" "${dict[@]}" "$tmp/corpus" >"$tmp/log" 2>&1
  rc=$?
  executions=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$tmp/log" | tail -n 1)
  crashes=$(find "$tmp/artifacts" -type f | wc -l)
  if ((rc != 0 && crashes == 0)); then crashes=1; fi
  crashes=$((crashes + replay))
  echo "COUNTS: cargo_fuzz target=$t executions=${executions:-0} crashes=$crashes replayed=${#inputs[@]}"
  if ((crashes > 0)); then
    tail -n 60 "$tmp/log"
    echo "rust_$t: findings kept in $tmp (add them to tests/fuzz/crashers/rust_$t)"
    failed=1
  else
    rm -rf "$tmp"
  fi
done
exit "$failed"
