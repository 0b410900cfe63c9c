#!/usr/bin/env bash
# The PostgreSQL 15 server one ctest phase shares (a ctest fixture:
# tests/tiers.cmake, tests/CMakeLists.txt): started once before the first
# test that needs it, stopped after the last, instead of an initdb per test
# process. Tests attach through DENSEFS_TEST_POSTGRES_SERVICE=DIR
# (tests/postgres_server.h, tests/mount/postgres_lib.sh) and make databases
# of their own. A test that stops or restarts its server keeps a private one.
#
#   postgres_service.sh start DIR   initdb into DIR/data (a leftover of a
#                                   killed run is stopped and removed first),
#                                   listen on a unix socket in DIR only
#   postgres_service.sh stop DIR    stop it and remove DIR
#
# As root the server runs as the `postgres` user of Debian's postgresql-15,
# which owns DIR; fsync off (a test server).
set -euo pipefail
mode=${1:?usage: postgres_service.sh start|stop DIR}
dir=${2:?usage: postgres_service.sh start|stop DIR}
bin=/usr/lib/postgresql/15/bin
port=5432 # part of the socket's name only: the directory is private

as_server() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

stop() {
  if [[ -f $dir/data/postmaster.pid ]]; then
    as_server "$bin/pg_ctl" -D "$dir/data" -m immediate -w -s stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

case $mode in
  start)
    if [[ ! -x $bin/initdb ]]; then
      echo "PostgreSQL 15 is not installed (no $bin/initdb; tools/setup.sh test installs postgresql-15)" >&2
      # 77: skipped; the tests that need it then fail or skip on their own.
      [[ ${DENSEFS_REQUIRE_TOOLS:-0} == 1 ]] && exit 1
      exit 77
    fi
    stop
    mkdir -p "$dir"
    [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
    chmod 0755 "$dir"
    as_server "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync \
      --no-instructions -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
      tail -n 20 "$dir/initdb.log" >&2
      echo "FAIL: initdb into $dir/data failed" >&2
      exit 1
    }
    as_server "$bin/pg_ctl" start -D "$dir/data" -w -t 60 -s -l "$dir/server.log" \
      -o "-c listen_addresses='' -k $dir -p $port -c fsync=off -c full_page_writes=off -c max_connections=300" || {
      tail -n 20 "$dir/server.log" >&2
      echo "FAIL: the PostgreSQL server in $dir did not start" >&2
      exit 1
    }
    echo "PostgreSQL 15 for this phase: socket in $dir"
    ;;
  stop)
    stop
    ;;
  *)
    echo "usage: postgres_service.sh start|stop DIR" >&2
    exit 2
    ;;
esac
