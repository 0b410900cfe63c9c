#!/usr/bin/env bash
# One libFuzzer target under ctest (tests/fuzz/CMakeLists.txt).
#
#   run_fuzz.sh replay BINARY NAME FUZZ_SOURCE_DIR 0
#       runs every input of corpus/NAME and crashers/NAME once
#   run_fuzz.sh run BINARY NAME FUZZ_SOURCE_DIR SECONDS
#       fuzzes for SECONDS from a temp copy of corpus/NAME (with
#       dict/NAME.dict); new inputs and crashers stay in the temp dir, which
#       is kept and named when the run fails.
#
# Prints one line: COUNTS: fuzz target=NAME executions=N crashes=C
# (replay: COUNTS: fuzz_replay target=NAME inputs=N crashes=C).
set -u
mode=$1 binary=$2 name=$3 dir=$4 seconds=$5

corpus=$dir/corpus/$name
crashers=$dir/crashers/$name
dict=$dir/dict/$name.dict
# ASan+UBSan reports end the run (the build passes -fno-sanitize-recover);
# leaks count as findings too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

inputs=()
for d in "$corpus" "$crashers"; do
  [[ -d $d ]] || continue
  while IFS= read -r -d '' f; do inputs+=("$f"); done \
    < <(find "$d" -type f ! -name 'README*' -print0 | sort -z)
done

case $mode in
  replay)
    if ((${#inputs[@]} == 0)); then
      echo "no inputs in $corpus" >&2
      exit 1
    fi
    # Given files (not directories), libFuzzer runs each once and writes nothing.
    log=$(mktemp "${TMPDIR:-/tmp}/densefs-fuzz-replay-$name.XXXXXX")
    if "$binary" -rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=20 "${inputs[@]}" >"$log" 2>&1; then
      crashes=0
    else
      crashes=1
      tail -n 60 "$log"
    fi
    rm -f "$log"
    echo "COUNTS: fuzz_replay target=$name inputs=${#inputs[@]} crashes=$crashes"
    exit "$crashes"
    ;;
  run)
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/densefs-fuzz-$name.XXXXXX")
    mkdir "$tmp/corpus" "$tmp/artifacts"
    if [[ -d $corpus ]]; then cp -r "$corpus/." "$tmp/corpus/"; fi
    args=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=256 -print_final_stats=1
          -artifact_prefix="$tmp/artifacts/")
    [[ -f $dict ]] && args+=(-dict="$dict")
    "$binary" "${args[@]}" "$tmp/corpus" >"$tmp/log" 2>&1
    rc=$?
    executions=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$tmp/log" | tail -n 1)
    crashes=$(find "$tmp/artifacts" -type f | wc -l)
    if ((rc != 0 && crashes == 0)); then crashes=1; fi
    echo "COUNTS: fuzz target=$name executions=${executions:-0} crashes=$crashes"
    if ((rc != 0)); then
      tail -n 80 "$tmp/log"
      echo "fuzz.$name: finding kept in $tmp (add it to tests/fuzz/crashers/$name)" >&2
      exit 1
    fi
    rm -rf "$tmp"
    ;;
  *)
    echo "usage: run_fuzz.sh replay|run BINARY NAME FUZZ_SOURCE_DIR SECONDS" >&2
    exit 2
    ;;
esac
