# shellcheck shell=bash
# $work, fail and missing_tool come from mount_lib.sh, sourced first.
# shellcheck disable=SC2154
# Sourced after mount_lib.sh by the tests of stores whose records live in
# PostgreSQL (docs/scale-out.md). Starts a private PostgreSQL 15 server for
# the test: initdb into $work/pg, listening only on a unix socket in
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

pg_dir=$work/pg
pg_socket_dir=$pg_dir/run
pg_data=$pg_dir/data
pg_port=5432 # part of the socket's name only: the directory is private

# The server's user must reach its directory inside $work (mktemp made
# $work 0700).
chmod 0755 "$work"
mkdir -p "$pg_socket_dir"
chown -R postgres: "$pg_dir"

as_postgres() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

as_postgres "$pg_bin/initdb" -D "$pg_data" -U postgres -A trust -E UTF8 --no-sync \
  >"$pg_dir/initdb.log" 2>&1 || {
  tail -n 20 "$pg_dir/initdb.log" >&2
  fail "initdb failed"
}

pg_start() {
  as_postgres "$pg_bin/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w -s \
    -o "-c listen_addresses='' -c unix_socket_directories=$pg_socket_dir -p $pg_port -c fsync=off -c max_connections=200" \
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
  pg_stop immediate
  cleanup_work
  return $rc
}
trap cleanup_postgres EXIT

pg_start

pg_conninfo() {
  echo "host=$pg_socket_dir port=$pg_port user=postgres dbname=$1"
}

pg_sql() {
  as_postgres psql -X -q -v ON_ERROR_STOP=1 -h "$pg_socket_dir" -p "$pg_port" -U postgres \
    -d "$1" -At -c "$2"
}

pg_createdb() {
  pg_sql postgres "CREATE DATABASE \"$1\""
}
