# shellcheck shell=bash
# $work, fail and missing_tool come from mount_lib.sh, sourced first.
# shellcheck disable=SC2154
# Sourced after mount_lib.sh by the tests of stores whose records live in
# PostgreSQL (docs/scale-out.md). Under ctest that is the phase's server
# (below); otherwise, and for a script that sets pg_private=1 because it
# stops or restarts the server, a private PostgreSQL 15 server for the
# test: initdb into $work/pg, listening only on a unix socket in
# $work/pg/run (no TCP), fsync off; as root the server runs as the
# `postgres` user the Debian package creates. Stopped at exit, before
# mount_lib.sh's cleanup removes $work.
#
# After sourcing: $pg_socket_dir, pg_conninfo DB (a libpq connection string
# for database DB as the superuser), pg_createdb DB, pg_sql DB SQL,
# pg_stop, pg_start.

pg_bin=/usr/lib/postgresql/15/bin
[[ -x $pg_bin/initdb && -x $pg_bin/pg_ctl ]] ||
  missing_tool "PostgreSQL 15 server (Debian postgresql-15)"
getent passwd postgres >/dev/null || missing_tool "the postgres user (Debian postgresql-15)"

pg_port=5432 # part of the socket's name only: the directory is private

as_postgres() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# At exit, after this file's own cleanup: whatever was installed before it
# (mount_lib.sh's cleanup_work, which unmounts and removes $work, or a
# cleanup that ends in it). Each cleanup turns errexit off first: it hands
# the script's status on with `(exit "$rc")`, which under set -e would end
# the trap there after a failed test, leaving its mounts (exit_trap_test.sh).
pg_prev_exit_trap=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT\$/\1/")
[[ -n $pg_prev_exit_trap ]] || pg_prev_exit_trap=cleanup_work

# Under ctest the phase's server (DENSEFS_TEST_POSTGRES_SERVICE, a fixture:
# tests/services/postgres_service.sh) unless the script stops or restarts
# its server: such a script sets pg_private=1 before sourcing this file.
if [[ -n ${DENSEFS_TEST_POSTGRES_SERVICE:-} && ${pg_private:-0} != 1 ]]; then
  pg_socket_dir=$DENSEFS_TEST_POSTGRES_SERVICE
  [[ -S $pg_socket_dir/.s.PGSQL.$pg_port ]] ||
    fail "the phase's PostgreSQL server is not running (no socket in $pg_socket_dir; ctest starts it as service.postgres)"
  pg_start() { fail "this script shares the phase's PostgreSQL server: set pg_private=1 before sourcing postgres_lib.sh to restart one"; }
  pg_stop() { pg_start; }
  # The databases this script makes (its own and its mkfs_store's) are
  # dropped at exit; the server stays.
  pg_databases_before=$(as_postgres psql -X -At -h "$pg_socket_dir" -p "$pg_port" -U postgres -d postgres \
    -c "SELECT datname FROM pg_database") || fail "the phase's PostgreSQL server does not answer"
  cleanup_postgres() {
    local rc=$? db
    set +e
    (exit "$rc")
    eval "$pg_prev_exit_trap"
    for db in $(as_postgres psql -X -At -h "$pg_socket_dir" -p "$pg_port" -U postgres -d postgres \
      -c "SELECT datname FROM pg_database" 2>/dev/null); do
      grep -qxF "$db" <<<"$pg_databases_before" ||
        as_postgres psql -X -q -h "$pg_socket_dir" -p "$pg_port" -U postgres -d postgres \
          -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
    done
    return $rc
  }
  trap cleanup_postgres EXIT
else
  pg_dir=$work/pg
  pg_socket_dir=$pg_dir/run
  pg_data=$pg_dir/data

  # The server's user must reach its directory inside $work (mktemp made
  # $work 0700).
  chmod 0755 "$work"
  mkdir -p "$pg_socket_dir"
  chown -R postgres: "$pg_dir"

  as_postgres "$pg_bin/initdb" -D "$pg_data" -U postgres -A trust -E UTF8 --no-sync \
    >"$pg_dir/initdb.log" 2>&1 || {
    tail -n 20 "$pg_dir/initdb.log" >&2
    fail "initdb failed"
  }

  # pg_listen (set before sourcing, with pg_private=1): TCP addresses the
  # server listens on too, trusting clients of pg_listen_net
  # (tests/bench/scale_out_netem.sh); none by default.
  if [[ -n ${pg_listen:-} ]]; then
    echo "host all all ${pg_listen_net:?pg_listen needs pg_listen_net} trust" >>"$pg_data/pg_hba.conf"
  fi

  pg_start() {
    as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w -s \
      -o "-c listen_addresses='${pg_listen:-}' -c unix_socket_directories=$pg_socket_dir -p $pg_port -c fsync=off -c max_connections=200" \
      start || {
      tail -n 20 "$pg_dir/server.log" >&2
      fail "the PostgreSQL server did not start"
    }
  }

  pg_stop() {
    as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -m "${1:-fast}" -w -s stop >/dev/null 2>&1 || true
  }

  # The server goes before $work (and its mounts: a daemon that still holds a
  # connection only sees it closed).
  cleanup_postgres() {
    local rc=$?
    set +e
    pg_stop immediate
    (exit "$rc")
    eval "$pg_prev_exit_trap"
    return $rc
  }
  trap cleanup_postgres EXIT

  pg_start
fi

pg_conninfo() {
  echo "host=$pg_socket_dir port=$pg_port user=postgres dbname=$1"
}

pg_sql() {
  as_postgres psql -X -q -v ON_ERROR_STOP=1 -h "$pg_socket_dir" -p "$pg_port" -U postgres \
    -d "$1" -At -c "$2"
}

pg_createdb() {
  # On the phase's server a name a killed run left is taken again.
  pg_sql postgres "DROP DATABASE IF EXISTS \"$1\" WITH (FORCE)"
  pg_sql postgres "CREATE DATABASE \"$1\""
}
