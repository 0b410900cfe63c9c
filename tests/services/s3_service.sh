#!/usr/bin/env bash
# The S3 server (Ceph's radosgw on a private one-node cluster) one ctest
# phase shares (a ctest fixture: tests/tiers.cmake): created once before the
# first test that needs it, stopped after the last, instead of a cluster per
# script. The cluster is tests/mount/s3_lib.sh's; scripts attach through
# DENSEFS_TEST_S3_SERVICE=DIR and make buckets or prefixes of their own. A
# script that stops or restarts its server keeps a private one.
#
#   s3_service.sh start DIR   create the cluster in DIR (a leftover of a
#                             killed run is stopped and removed first);
#                             DIR/env then holds the endpoint and keys
#   s3_service.sh stop DIR    stop its daemons and remove DIR
set -euo pipefail
mode=${1:?usage: s3_service.sh start|stop DIR}
dir=${2:?usage: s3_service.sh start|stop DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# What s3_lib.sh takes from mount_lib.sh.
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
missing_tool() {
  if [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]]; then
    fail "$1 is not installed (tools/setup.sh test installs it)"
  fi
  echo "SKIP: $1 is not installed; run tools/setup.sh test to install it" >&2
  exit 77
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# Stops whatever daemons DIR's pid files name (if they are still theirs).
stop() {
  local name comm pid
  for name in client.rgw:radosgw osd.0:ceph-osd mon.a:ceph-mon; do
    comm=${name#*:} name=${name%%:*}
    pid=$(cat "$dir/run/$name.pid" 2>/dev/null) || continue
    [[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || continue
    kill -s KILL "$pid" 2>/dev/null || true
    while [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; do
      sleep 0.05
    done
  done
  rm -rf "$dir"
}

case $mode in
  start)
    stop
    mkdir -p "$dir"
    chmod 0700 "$dir"
    # The daemons outlive this script: their output goes to a log, never to
    # ctest's pipe (which ctest would wait on).
    rc=0
    (
      # shellcheck disable=SC2034 # read by s3_lib.sh
      s3_service_starting=1 s3_dir=$dir work=$dir
      # shellcheck source=../mount/s3_lib.sh
      source "$here/../mount/s3_lib.sh"
    ) </dev/null >"$dir.log" 2>&1 || rc=$?
    cat "$dir.log"
    rm -f "$dir.log"
    if ((rc != 0)); then
      stop
      exit "$rc"
    fi
    ;;
  stop)
    stop
    ;;
  *)
    echo "usage: s3_service.sh start|stop DIR" >&2
    exit 2
    ;;
esac
