#!/usr/bin/env bash
# CZIP benchmark and 1 GiB round trip (not a test: ctest never runs it; it
# takes a few minutes). The machines are shared: compare rows of one run.
#   1. builds a 1 GiB input from real files (a tar of shared libraries and
#      /usr/share, repeated if there is less than 1 GiB of them);
#   2. chunking + SHA-256 throughput (the pack front end), one thread;
#   3. pack and unpack, plain and encrypted: through pipes (footer mode) and
#      file to file (header mode), checking both round trips by SHA-256.
# Usage: tests/bench/czip_bench.sh [BUILD_DIR] [WORK_DIR]
#   env: SIZE_MB (default 1024), SOURCES (default /usr/lib/x86_64-linux-gnu /usr/share)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
work=${2:-/var/tmp/densefs-czip-bench}
size_mb=${SIZE_MB:-1024}
read -r -a sources <<<"${SOURCES:-/usr/lib/x86_64-linux-gnu /usr/share}"
mkdir -p "$work"
trap 'rm -f "$work"/*.czip "$work/pass"' EXIT

echo "== $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== building the helpers"
cmake --build "$build" --target densefs densefs_czip_bench >/dev/null
densefs=$build/tools/densefs
bench=$build/tests/bench/densefs_czip_bench

input=$work/input-${size_mb}M
if [[ ! -f $input ]]; then
  echo "== building $input"
  tar -C / --sort=name -cf "$work/sources.tar" "${sources[@]#/}" 2>/dev/null || true
  copies=$(((size_mb << 20) / $(stat -c %s "$work/sources.tar") + 1))
  for ((i = 0; i < copies; i++)); do cat "$work/sources.tar"; done 2>/dev/null |
    head -c $((size_mb << 20)) >"$input.tmp" || true
  mv "$input.tmp" "$input"
  rm -f "$work/sources.tar"
fi
bytes=$(stat -c %s "$input")
want=$(sha256sum <"$input" | cut -d' ' -f1)

# MB/s (10^6 bytes) of $bytes over the seconds a command took.
rate() { awk -v b="$bytes" -v s="$1" 'BEGIN { printf "%.0f MB/s (%.2f s)", b / s / 1e6, s }'; }
timed() {  # timed VAR command...: runs it, stores the seconds in VAR
  local var=$1 start end
  shift
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  printf -v "$var" '%s' "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')"
}

echo "== chunking + SHA-256 over the first 256 MiB of the input"
head -c $((256 << 20)) "$input" >"$work/head"
"$bench" "$work/head" 3
rm -f "$work/head"

check() {  # check LABEL SHA
  if [[ $2 == "$want" ]]; then echo "   $1: round trip ok"; else
    echo "   $1: ROUND TRIP MISMATCH" >&2
    exit 1
  fi
}

t=0
for mode in plain encrypted; do
  args=()
  if [[ $mode == encrypted ]]; then
    printf 'czip bench passphrase\n' >"$work/pass"
    args=(--encrypt --passphrase-file "$work/pass")
  fi
  echo "== $mode, $((bytes >> 20)) MiB"
  # cat makes standard input a pipe, as in `producer | densefs czip pack - -`.
  # shellcheck disable=SC2002
  pack_pipe() { cat "$input" | "$densefs" czip pack "${args[@]}" - - | cat >"$work/$mode.czip"; }
  timed t pack_pipe
  echo "   pack (stdin -> stdout, footer mode):    $(rate "$t"), czip $(stat -c %s "$work/$mode.czip") bytes"
  pack_file() { "$densefs" czip pack "${args[@]}" "$input" "$work/$mode-header.czip"; }
  timed t pack_file
  echo "   pack (file -> file, header mode):       $(rate "$t")"
  read_args=()
  [[ $mode == encrypted ]] && read_args=(--passphrase-file "$work/pass")
  # Timed into /dev/null: a consumer such as sha256sum is slower than unpack.
  # shellcheck disable=SC2002
  unpack_pipe() { cat "$work/$mode.czip" | "$densefs" czip unpack "${read_args[@]}" - - >/dev/null; }
  timed t unpack_pipe
  echo "   unpack (stdin pipe -> stdout):          $(rate "$t") (includes spooling the czip to \$TMPDIR)"
  unpack_file() { "$densefs" czip unpack "${read_args[@]}" "$work/$mode-header.czip" - >/dev/null; }
  timed t unpack_file
  echo "   unpack (header-mode file -> stdout):    $(rate "$t")"
  "$densefs" czip unpack "${read_args[@]}" "$work/$mode-header.czip" - | sha256sum >"$work/sum"
  check "unpack FILE -" "$(cut -d' ' -f1 "$work/sum")"
  # The round trip, untimed: through pipes at both ends.
  # shellcheck disable=SC2002
  cat "$work/$mode.czip" | "$densefs" czip unpack "${read_args[@]}" - - | sha256sum >"$work/sum"
  check "unpack - - " "$(cut -d' ' -f1 "$work/sum")"
  timed t "$densefs" czip verify "${read_args[@]}" "$work/$mode.czip"
  echo "   verify:                                 $(rate "$t")"
  "$densefs" czip info "${read_args[@]}" "$work/$mode.czip" | sed 's/^/   /'
done
echo "== load average $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$work/sum"
