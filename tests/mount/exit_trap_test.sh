#!/usr/bin/env bash
# A mount test that fails leaves nothing behind: each case runs a script
# that sources mount_lib.sh (and postgres_lib.sh, on the phase's server and
# on a private one), mounts a store, makes a database, and then fails. Its
# exit status must be the failure's, and at its exit nothing may stay
# mounted under its directory, the directory must be gone, and its
# database dropped (the phase's server) or its server stopped (a private
# one). The libraries' cleanups chain at exit, each handing the script's
# status on; one that ended the trap early left a failed two_clients_test's
# writer and follower mounted, and the rerun saw their sessions.
# usage: exit_trap_test.sh DENSEFS_BINARY SOURCE_DIR
# shellcheck source=mount_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/mount_lib.sh"
# shellcheck source=tree_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tree_lib.sh"

[[ -x /usr/lib/postgresql/15/bin/initdb ]] || missing_tool "PostgreSQL 15 server (Debian postgresql-15)"

# A case's leftovers: unmounted, then removed (never through a mount).
remove_leftovers() { if unmount_below "$1"; then rm -rf "$1"; fi; }

# phase_database_exists NAME: whether the phase's server still has NAME.
phase_database_exists() {
  [[ $(runuser -u postgres -- psql -X -At -h "$DENSEFS_TEST_POSTGRES_SERVICE" -p 5432 -U postgres \
    -d postgres -c "SELECT count(*) FROM pg_database WHERE datname = '$1'") != 0 ]]
}

# fails_and_cleans_up NAME SETUP: a script that runs SETUP after sourcing
# mount_lib.sh, then mounts a store and fails with a mount live.
fails_and_cleans_up() {
  local name=$1 setup=$2 rc=0 child_work database
  local script=$work/$name.sh out=$work/$name.out
  cat >"$script" <<EOF
source "$src/tests/mount/mount_lib.sh"
echo "work=\$work"
$setup
"\$densefs" mkfs "\$work/store" >/dev/null
mkdir "\$work/mnt"
mount_densefs "\$work/store" "\$work/mnt"
echo mounted
fail "on purpose, with \$work/mnt mounted"
EOF
  bash "$script" "$densefs" "$src" >"$out" 2>&1 || rc=$?
  ((rc != 77)) || skip "$name: $(cat "$out")"
  child_work=$(sed -n 's/^work=//p' "$out")
  [[ -n $child_work ]] || fail "$name: the script printed no directory: $(cat "$out")"
  database=$(sed -n 's/^database=//p' "$out")
  if findmnt -rn -o TARGET | grep -qF "$child_work/"; then
    remove_leftovers "$child_work"
    fail "$name: a failed script left mounts under $child_work: $(cat "$out")"
  fi
  grep -qx mounted "$out" || fail "$name: the script failed before it mounted: $(cat "$out")"
  ((rc == 1)) || fail "$name: the script exited $rc, not its failure's 1: $(cat "$out")"
  if pgrep -f -- "-D $child_work/" >/dev/null; then
    fail "$name: a failed script left its private PostgreSQL server running"
  fi
  if [[ -e $child_work ]]; then
    remove_leftovers "$child_work"
    fail "$name: a failed script left $child_work"
  fi
  if [[ -n $database ]] && phase_database_exists "$database"; then
    fail "$name: a failed script left its database $database on the phase's server"
  fi
  echo "$name: exit 1, nothing left behind"
}

step "mount_lib.sh alone"
fails_and_cleans_up plain ""

step "postgres_lib.sh, a private server"
fails_and_cleans_up private_postgres "pg_private=1
source \"$src/tests/mount/postgres_lib.sh\"
pg_createdb vol1"

if [[ -n ${DENSEFS_TEST_POSTGRES_SERVICE:-} ]]; then
  step "postgres_lib.sh, the phase's server"
  fails_and_cleans_up phase_postgres "source \"$src/tests/mount/postgres_lib.sh\"
pg_createdb exit_trap_$$
echo database=exit_trap_$$"
fi

echo "PASS: a failed mount test leaves nothing mounted, no directory, no database"
