#!/bin/bash
# The S3 server of docker/scale-out.compose.yaml: Ceph's radosgw on a private
# one-node Ceph cluster, the same cluster tests/mount/s3_lib.sh starts for
# the tests (docs/s3-test-server.md has the reasons for each setting). The
# three daemons run in the foreground as children of this script, which
# stays the container's main process:
#
#   ceph-mon   one monitor on 127.0.0.1:$S3_MON_PORT, cephx on
#   ceph-osd   one BlueStore OSD whose disk is a sparse file in
#              $S3_DATA_DIR (it takes what is written)
#   radosgw    the S3 endpoint (beast frontend) on $S3_ADDRESS:$S3_PORT,
#              path-style URLs
#
# First start (no $S3_DATA_DIR/cluster-ready): keyrings, monitor, OSD and
# radosgw's pools are made there. Later starts run the daemons on that
# state, so objects outlive the container. Every start sets the S3 user's
# key pair from the environment. SIGTERM or SIGINT stops radosgw, the OSD
# and the monitor in that order, each waited for, and exits 0; a daemon
# that exits by itself has the others stopped and the script exits 1.
#
# usage: s3-entrypoint.sh            run the server
#        s3-entrypoint.sh health     exit 0 once radosgw answers and the
#                                    user exists (a healthcheck)
#
# Environment (only S3_ACCESS_KEY and S3_SECRET_KEY are required):
#   S3_ACCESS_KEY, S3_SECRET_KEY  the S3 user's key pair; when unset,
#                                 AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
#   S3_USER           the user's id (default densefs)
#   S3_DATA_DIR       the cluster's state (default /var/lib/densefs-s3)
#   S3_ADDRESS        radosgw's address (default 0.0.0.0)
#   S3_PORT           radosgw's port (default 7480)
#   S3_MON_PORT       the monitor's port on 127.0.0.1 (default 6789; fixed
#                     at the first start, which records it)
#   S3_DISK_SIZE_GB   the OSD's disk file (default 100; first start only)
#
# The daemons log to this script's stderr (the container's log) at Ceph's
# default levels, except radosgw (which would log every request) and the
# OSD's storage layers (thousands of lines at each start): errors only.
set -euo pipefail

# ceph_one_node_conf: beside this script in a checkout, in the image at
# /usr/local/lib/densefs-s3 (docker/Dockerfile.s3).
here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
if [[ -f $here/ceph-one-node.sh ]]; then
  # shellcheck source=ceph-one-node.sh
  source "$here/ceph-one-node.sh"
else
  # shellcheck source=/dev/null
  source /usr/local/lib/densefs-s3/ceph-one-node.sh
fi

state=${S3_DATA_DIR:-/var/lib/densefs-s3}
address=${S3_ADDRESS:-0.0.0.0}
port=${S3_PORT:-7480}
uid=${S3_USER:-densefs}
conf=$state/ceph.conf
ready=$state/run/ready

say() { echo "s3-entrypoint: $*" >&2; }
die() {
  say "$*"
  exit 1
}

# The address to ask radosgw on: itself, unless it listens on all of them.
probe_url() {
  local a=$address
  [[ $a == 0.0.0.0 || $a == '*' ]] && a=127.0.0.1
  echo "http://$a:$port/"
}

# An anonymous GET / is a bucket listing of the anonymous user: 200 once
# radosgw serves requests.
rgw_answers() {
  [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$(probe_url)") == 200 ]]
}

if [[ ${1:-} == health ]]; then
  [[ -e $ready ]] && rgw_answers
  exit
fi
[[ $# -eq 0 ]] || die "usage: s3-entrypoint.sh [health]"

access_key=${S3_ACCESS_KEY:-${AWS_ACCESS_KEY_ID:-}}
secret_key=${S3_SECRET_KEY:-${AWS_SECRET_ACCESS_KEY:-}}
[[ -n $access_key && -n $secret_key ]] ||
  die "set S3_ACCESS_KEY and S3_SECRET_KEY (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY): the S3 user's key pair"
for tool in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph curl; do
  command -v "$tool" >/dev/null || die "$tool is missing (Debian radosgw, ceph-mon, ceph-osd, curl)"
done

mkdir -p "$state"
cd "$state"
# The fsid and the monitor's port are the cluster's identity: the monitor's
# store records both, so they are chosen once.
if [[ ! -e cluster-ready ]]; then
  # A first start that did not finish left nothing worth keeping.
  rm -rf ceph.conf fsid mon-port keyring mon osd.0 osd.0.block monmap osd-secret.json run crash rgw
  cat /proc/sys/kernel/random/uuid >fsid
  echo "${S3_MON_PORT:-6789}" >mon-port
fi
fsid=$(<fsid)
mon_port=$(<mon-port)
mkdir -p mon osd.0 run crash rgw
rm -f "$ready"
(umask 077 && touch keyring)

# Rewritten at every start (a new S3_ADDRESS or S3_PORT takes effect); the
# same cluster as the tests' (tests/mount/s3_lib.sh) but for its logs: to
# this script's stderr.
ceph_one_node_conf "$state" "$fsid" "$mon_port" "$address:$port" \
  $((${S3_DISK_SIZE_GB:-100} << 30)) stderr >"$conf"

ceph_cli() { timeout 120 ceph -c "$conf" --connect-timeout 60 "$@"; }

# --- The daemons: children of this script, in the foreground (-f). -------

mon_pid='' osd_pid='' rgw_pid=''

# A zombie counts as gone: its exit is what we wait for.
alive() { [[ -n $1 && $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo Z) != Z ]]; }

# stop_daemon PID NAME: TERM, then KILL if it is still there after 30 s.
# A radosgw whose OSD is gone never finishes stopping (it waits for RADOS);
# it keeps no state of its own, so the KILL loses nothing.
stop_daemon() {
  local pid=$1 name=$2 i
  [[ -n $pid ]] || return 0
  kill -s TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 300; i++)); do
    alive "$pid" || break
    sleep 0.1
  done
  if ((i == 300)); then
    say "$name (pid $pid) did not stop within 30 s of SIGTERM: killing it"
    kill -s KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

stop_all() {
  rm -f "$ready"
  stop_daemon "$rgw_pid" radosgw
  stop_daemon "$osd_pid" ceph-osd
  stop_daemon "$mon_pid" ceph-mon
  rgw_pid='' osd_pid='' mon_pid=''
}

on_signal() {
  trap '' TERM INT
  say "stopping radosgw, ceph-osd, ceph-mon"
  stop_all
  say "stopped"
  exit 0
}
trap on_signal TERM INT
# Any other exit (a failed step) takes the daemons with it.
trap 'stop_all' EXIT

start_mon() {
  ceph-mon -f -c "$conf" -i a </dev/null &
  mon_pid=$!
}

# Returns once the monitor reports osd.0 up.
start_osd() {
  local i
  ceph-osd -f -c "$conf" -i 0 </dev/null &
  osd_pid=$!
  for ((i = 0; i < 240; i++)); do
    ceph_cli osd dump 2>/dev/null | grep -q '^osd\.0 up' && return 0
    alive "$osd_pid" || die "ceph-osd exited during startup"
    sleep 0.5
  done
  die "osd.0 is not up after 2 min"
}

# Returns once radosgw answers HTTP.
start_rgw() {
  local i
  radosgw -f -c "$conf" -n client.rgw </dev/null &
  rgw_pid=$!
  for ((i = 0; i < 1200; i++)); do
    rgw_answers && return 0
    alive "$rgw_pid" || die "radosgw exited during startup"
    sleep 0.1
  done
  die "radosgw does not answer on $(probe_url) after 2 min"
}

# --- First start: the cluster. -------------------------------------------

if [[ ! -e cluster-ready ]]; then
  say "creating a one-node Ceph cluster in $state"
  ceph-authtool --create-keyring keyring --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool keyring --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
    --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  ceph-authtool keyring --gen-key -n client.rgw --cap mon 'allow rw' --cap osd 'allow rwx' \
    --cap mgr 'allow rw' >/dev/null
  monmaptool --create --fsid "$fsid" --addv a "[v1:127.0.0.1:$mon_port]" monmap >/dev/null
  ceph-mon -c "$conf" --mkfs -i a --monmap monmap --keyring keyring || die "ceph-mon --mkfs failed"
  start_mon
  # The OSD: registered with its key in one call (as ceph-volume does),
  # then its BlueStore file made.
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  osd_key=$(ceph-authtool --gen-print-key)
  (umask 077 && printf '{"cephx_secret": "%s"}\n' "$osd_key" >osd-secret.json)
  osd_id=$(ceph_cli osd new "$osd_uuid" -i osd-secret.json) || die "ceph osd new failed"
  rm -f osd-secret.json
  [[ $osd_id == 0 ]] || die "ceph osd new gave id '$osd_id', not 0"
  ceph-authtool --create-keyring osd.0/keyring -n osd.0 --add-key "$osd_key" >/dev/null
  ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" || die "ceph-osd --mkfs failed"
  start_osd
  # radosgw's pools in one call (radosgw would make them one by one, each
  # waiting for a map commit). `ceph` reads commands from its stdin.
  for pool in .rgw.root default.rgw.control default.rgw.meta default.rgw.log \
    default.rgw.buckets.index default.rgw.buckets.data default.rgw.buckets.non-ec; do
    echo "osd pool create $pool 8 8"
    echo "osd pool application enable $pool rgw"
  done | ceph_cli >/dev/null || die "creating radosgw's pools failed"
  touch cluster-ready
else
  say "starting the Ceph cluster in $state"
  start_mon
  start_osd
fi
start_rgw

# --- The S3 user. ---------------------------------------------------------

# The key pair goes to radosgw-admin in CEPH_ARGS, which Ceph's tools read
# as extra arguments, so that it is never on a command line (ps shows
# those). `user create` makes the user with this key pair; on a later
# start the user exists and `key create` adds this access key or sets its
# secret (another access key of an earlier start stays valid until
# `radosgw-admin key rm`).
rgw_admin() { CEPH_ARGS="--access-key=$access_key --secret-key=$secret_key" \
  timeout 120 radosgw-admin -c "$conf" -n client.admin "$@"; }
if timeout 120 radosgw-admin -c "$conf" -n client.admin user info --uid="$uid" >/dev/null 2>&1; then
  rgw_admin key create --uid="$uid" --key-type=s3 >/dev/null || die "radosgw-admin key create failed"
else
  rgw_admin user create --uid="$uid" --display-name="densefs" >/dev/null ||
    die "radosgw-admin user create failed"
fi
touch "$ready"
say "radosgw $(radosgw --version | awk '{print $3}') answers on $(probe_url), user $uid ready"

# --- Serve until a signal, or until a daemon exits. -----------------------

while :; do
  wait -n "$mon_pid" "$osd_pid" "$rgw_pid" || true
  for pid_var in mon_pid osd_pid rgw_pid; do
    if ! alive "${!pid_var}"; then
      say "${pid_var%_pid} daemon (pid ${!pid_var}) exited; stopping the others"
      # Reaped already: its pid may be someone else's by now.
      printf -v "$pid_var" '%s' ''
      exit 1
    fi
  done
done
