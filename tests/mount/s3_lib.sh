# shellcheck shell=bash
# $work, fail and missing_tool come from mount_lib.sh, sourced first.
# shellcheck disable=SC2154
# Sourced after mount_lib.sh (and after postgres_lib.sh, when a test uses
# both) by the tests of payloads in S3-compatible object storage
# (docs/scale-out.md). Starts a real S3 server for the test: Ceph's radosgw
# (Debian 12's radosgw, ceph-mon, ceph-osd; tools/setup.sh test installs
# them) on a private one-node Ceph cluster, run as plain processes, no
# systemd:
#
#   ceph-mon   one monitor, cephx on, on a free 127.0.0.1 port
#   ceph-osd   one BlueStore OSD whose "disk" is a sparse file in $work, so
#              objects survive a restart of any daemon, kill -9 included
#   radosgw    the S3 endpoint (beast frontend) on another free 127.0.0.1
#              port, path-style URLs, SigV4 and V2 signatures
#
# Everything lives in $work/s3 (config, keyrings, logs, the OSD's file); all
# three are stopped at exit, before mount_lib.sh's cleanup removes $work.
# docs/s3-test-server.md has the measurements and the reasons.
#
# After sourcing (the server is up, with one user and no bucket):
#   S3_ENDPOINT, DENSEFS_TEST_S3_ENDPOINT   http://127.0.0.1:PORT
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY the user's key pair (random)
#   AWS_REGION, AWS_DEFAULT_REGION           us-east-1 (radosgw takes any
#                                            region in a SigV4 scope)
#   s3_curl [curl args...] URL      curl with SigV4 for that user; adds
#                                   x-amz-content-sha256: UNSIGNED-PAYLOAD
#                                   unless the args set that header
#   s3_stop [SIGNAL]  stops radosgw (default TERM; KILL for a crash, and it
#                     waits for the process to go either way). The cluster
#                     behind it keeps running: objects stay.
#   s3_start          starts radosgw again on the same port, returns once
#                     it answers HTTP ($s3_rgw_start_seconds: how long)
#   s3_pid            radosgw's PID (for kill -STOP/-CONT: a hung server)
#   s3_cluster_stop [SIGNAL] / s3_cluster_start
#                     the same for all three daemons (a storage host that
#                     goes away and comes back)
#   s3_admin ARGS...  radosgw-admin on this cluster (more users, quotas)
#   s3_dir            the directory; daemon logs in $s3_dir/log

s3_packages="Debian radosgw, ceph-mon and ceph-osd (tools/setup.sh test)"
for s3_tool in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph; do
  command -v "$s3_tool" >/dev/null || missing_tool "$s3_tool, from $s3_packages,"
done
command -v curl >/dev/null || missing_tool "curl (Debian curl)"
curl --help all 2>/dev/null | grep -q -- --aws-sigv4 ||
  missing_tool "a curl with --aws-sigv4 (7.75 or later; Debian 12 has 7.88)"
unset s3_tool

# Under ctest, the radosgw the phase shares (DENSEFS_TEST_S3_SERVICE names
# its directory: tests/services/s3_service.sh, a ctest fixture) unless the
# script stops or restarts the server: such a script sets s3_private=1
# before sourcing this file. s3_service.sh itself sets s3_dir and
# s3_service_starting=1 to create that server.
s3_shared=0
if [[ -n ${DENSEFS_TEST_S3_SERVICE:-} && ${s3_private:-0} != 1 && -z ${s3_service_starting:-} ]]; then
  s3_shared=1
  s3_dir=$DENSEFS_TEST_S3_SERVICE
else
  s3_dir=${s3_dir:-$work/s3}
fi
s3_conf=$s3_dir/ceph.conf
s3_curl_tls=() # curl's TLS arguments: set below when radosgw serves https

# A port nothing answers on, below Linux's ephemeral range (32768-60999, so
# no outgoing connection takes it meanwhile) and above the OSD's own range
# (6800-7300, which the OSD picks from by itself).
s3_free_port() {
  local p i
  for i in {1..100}; do
    p=$((20000 + (RANDOM % 12000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  fail "s3_lib: found no free TCP port on 127.0.0.1 in 100 tries"
}

# Every ceph CLI call is bounded: a monitor that is gone must not hang the
# test until ctest's timeout.
s3_ceph() { timeout 120 ceph -c "$s3_conf" --connect-timeout 60 "$@"; }
s3_admin() { timeout 120 radosgw-admin -c "$s3_conf" -n client.admin "$@"; }

s3_log_tail() {
  local f
  for f in "$s3_dir"/log/*; do
    [[ -f $f ]] || continue
    echo "--- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
}

s3_fail() {
  s3_log_tail
  fail "s3_lib: $*"
}

# Prints the PID in NAME's pid file if that process is still NAME (a stale
# file must never make us signal someone else's process).
s3_daemon_pid() {
  local name=$1 comm=$2 pid
  pid=$(cat "$s3_dir/run/$name.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || return 1
  echo "$pid"
}

# s3_stop_daemon NAME COMM SIGNAL: signals one daemon and waits until it is
# gone (a TERM not obeyed in 30 s becomes a KILL).
s3_stop_daemon() {
  local name=$1 comm=$2 sig=${3:-TERM} pid i
  pid=$(s3_daemon_pid "$name" "$comm") || return 0
  kill -s "$sig" "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 600; i++)); do
    [[ -d /proc/$pid ]] || break
    # A zombie is gone for our purposes (its parent reaps it).
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == Z ]] && break
    sleep 0.05
  done
  if [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; then
    kill -s KILL "$pid" 2>/dev/null || true
    sleep 0.2
  fi
  rm -f "$s3_dir/run/$name.pid"
}

s3_pid() { s3_daemon_pid client.rgw radosgw; }

# The daemons fork into the background themselves (ceph-mon and ceph-osd
# return once they are initialised); their own logs are in $s3_dir/log.
s3_start_mon() {
  ceph-mon -c "$s3_conf" -i a 2>>"$s3_dir/log/mon.a.stderr" ||
    s3_fail "ceph-mon did not start (port $s3_mon_port)"
}

s3_start_osd() {
  ceph-osd -c "$s3_conf" -i 0 2>>"$s3_dir/log/osd.0.stderr" || s3_fail "ceph-osd did not start"
  local i
  for ((i = 0; i < 240; i++)); do
    s3_ceph osd dump 2>/dev/null | grep -q '^osd\.0 up' && return 0
    sleep 0.25
  done
  s3_fail "osd.0 is not up after 60 s"
}

s3_start() {
  local i code start
  start=$(now)
  radosgw -c "$s3_conf" -n client.rgw 2>>"$s3_dir/log/client.rgw.stderr" ||
    s3_fail "radosgw did not start"
  # radosgw forks before it creates its pools and binds its port: wait until
  # it answers, and fail at once if it died.
  for ((i = 0; i < 1200; i++)); do
    code=$(curl -s "${s3_curl_tls[@]}" -o /dev/null -w '%{http_code}' --max-time 5 "$S3_ENDPOINT/") || code=000
    [[ $code == 200 ]] && break
    if ((i > 20)) && ! s3_pid >/dev/null; then
      s3_fail "radosgw exited during startup"
    fi
    sleep 0.05
  done
  [[ $code == 200 ]] || s3_fail "radosgw does not answer on $S3_ENDPOINT after 60 s"
  # shellcheck disable=SC2034 # read by the tests
  s3_rgw_start_seconds=$(elapsed "$start" "$(now)")
}

s3_stop() { s3_stop_daemon client.rgw radosgw "${1:-TERM}"; }

s3_cluster_stop() {
  local sig=${1:-TERM}
  s3_stop_daemon client.rgw radosgw "$sig"
  s3_stop_daemon osd.0 ceph-osd "$sig"
  s3_stop_daemon mon.a ceph-mon "$sig"
}

s3_cluster_start() {
  s3_start_mon
  s3_start_osd
  s3_start
}

# s3_curl [curl args...] URL: SigV4 as the test's user. Debian 12's curl
# (7.88) signs x-amz-content-sha256 only when the request carries it, and
# radosgw refuses SigV4 without it: so it is always sent.
s3_curl() {
  local a content_hash=(-H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
  for a in "$@"; do
    [[ ${a,,} == x-amz-content-sha256:* ]] && content_hash=()
  done
  curl -sS "${s3_curl_tls[@]}" --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "${content_hash[@]}" "$@"
}

# --- The phase's server: nothing to create, nothing to stop at exit. -------

if [[ $s3_shared == 1 ]]; then
  [[ -f $s3_dir/env ]] ||
    fail "the phase's S3 server is not running (no $s3_dir/env; ctest starts it as service.s3)"
  # shellcheck source=/dev/null
  source "$s3_dir/env"
  export S3_ENDPOINT DENSEFS_TEST_S3_ENDPOINT AWS_REGION AWS_DEFAULT_REGION \
    AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
  s3_shared_refusal() {
    fail "this script shares the phase's S3 server: set s3_private=1 before sourcing s3_lib.sh to stop or restart one"
  }
  s3_stop() { s3_shared_refusal; }
  s3_start() { s3_shared_refusal; }
  s3_cluster_stop() { s3_shared_refusal; }
  s3_cluster_start() { s3_shared_refusal; }
  echo "s3: the phase's radosgw on $S3_ENDPOINT ($s3_dir)"
  return 0
fi

mkdir -p "$s3_dir"/{mon,osd.0,run,log,crash,rgw}
s3_mon_port=$(s3_free_port)
# radosgw's port: what the script set in s3_port before sourcing this file
# (443: tests/mount/production_setup_test.sh, in a network namespace of
# its own), else a free one.
s3_port=${s3_port:-$(s3_free_port)}
while [[ $s3_port == "$s3_mon_port" ]]; do s3_mon_port=$(s3_free_port); done

# The cluster's configuration (its logs in files here).
s3_fsid=$(cat /proc/sys/kernel/random/uuid)
# Found from this file: tests/services/s3_service.sh sources it without
# mount_lib.sh (no $src).
# shellcheck source=../services/ceph_one_node.sh
source "$(dirname "${BASH_SOURCE[0]}")/../services/ceph_one_node.sh"
# The OSD's disk: a sparse file (it takes what is written, not 30 GiB).
# radosgw frees deleted objects' space hours later (its gc), so the phase's
# server holds every byte its scale-out tests write: a 10 GiB disk filled
# once (2026-11-30), and a full OSD answers no PUT.
# radosgw's address: 127.0.0.1, or what the script set in s3_bind before
# sourcing this file (0.0.0.0: a client in another network namespace,
# tests/bench/scale_out_netem.sh).
# https: when the script set s3_tls_cert and s3_tls_key (PEM files) and
# s3_tls_host (the name the certificate is for, which must resolve to
# 127.0.0.1) before sourcing this file; curl then checks the certificate
# against s3_tls_ca.
ceph_one_node_conf "$s3_dir" "$s3_fsid" "$s3_mon_port" "${s3_bind:-127.0.0.1}:$s3_port" $((30 << 30)) \
  "${s3_tls_cert:-}" "${s3_tls_key:-}" \
  >"$s3_conf" || s3_fail "writing $s3_conf failed"

# The daemons go before $work; then whatever cleanup was installed before
# this file (mount_lib.sh's, or postgres_lib.sh's, which ends in it). The
# phase's server being created (s3_service.sh) outlives its script.
s3_prev_exit_trap=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT\$/\\1/")
cleanup_s3() {
  local rc=$?
  set +e
  s3_cluster_stop KILL
  (exit "$rc")
  if [[ -n $s3_prev_exit_trap ]]; then eval "$s3_prev_exit_trap"; else cleanup_work; fi
  return "$rc"
}
[[ -n ${s3_service_starting:-} ]] || trap cleanup_s3 EXIT

# --- Create the cluster, then the S3 user. ----------------------------------

# s3_random SET N: N random characters from tr's SET (no SIGPIPE under
# pipefail: head reads a fixed amount, tr reads it all).
s3_random() {
  local s
  s=$(head -c 4096 /dev/urandom | tr -dc "$1")
  echo "${s:0:$2}"
}

s3_setup_start=$(now)
s3_keyring=$s3_dir/keyring
{
  ceph-authtool --create-keyring "$s3_keyring" --gen-key -n mon. --cap mon 'allow *' &&
    ceph-authtool "$s3_keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
      --cap mds 'allow *' --cap mgr 'allow *' &&
    ceph-authtool "$s3_keyring" --gen-key -n client.rgw --cap mon 'allow rw' --cap osd 'allow rwx' \
      --cap mgr 'allow rw' &&
    monmaptool --create --fsid "$s3_fsid" --addv a "[v1:127.0.0.1:$s3_mon_port]" "$s3_dir/monmap" &&
    ceph-mon -c "$s3_conf" --mkfs -i a --monmap "$s3_dir/monmap" --keyring "$s3_keyring"
} >"$s3_dir/log/mkfs.log" 2>&1 || s3_fail "creating the monitor failed ($s3_dir/log/mkfs.log: $(tail -n 3 "$s3_dir/log/mkfs.log"))"
s3_start_mon

# The OSD: registered with its key in one call (as ceph-volume does), then
# its BlueStore file made and the daemon started.
s3_osd_uuid=$(cat /proc/sys/kernel/random/uuid)
s3_osd_key=$(ceph-authtool --gen-print-key)
printf '{"cephx_secret": "%s"}\n' "$s3_osd_key" >"$s3_dir/osd-secret.json"
s3_osd_id=$(s3_ceph osd new "$s3_osd_uuid" -i "$s3_dir/osd-secret.json" 2>>"$s3_dir/log/mkfs.log") ||
  s3_fail "ceph osd new failed"
[[ $s3_osd_id == 0 ]] || s3_fail "ceph osd new gave id '$s3_osd_id', not 0"
{
  ceph-authtool --create-keyring "$s3_dir/osd.0/keyring" -n osd.0 --add-key "$s3_osd_key" &&
    ceph-osd -c "$s3_conf" -i 0 --mkfs --osd-uuid "$s3_osd_uuid"
} >>"$s3_dir/log/mkfs.log" 2>&1 || s3_fail "creating the OSD failed"
s3_start_osd

# radosgw's pools, made here in one CLI call instead of one by one by
# radosgw (its startup and a first bucket and object would each wait for
# one). `ceph` reads commands from its standard input.
{
  for s3_pool in .rgw.root default.rgw.control default.rgw.meta default.rgw.log \
    default.rgw.buckets.index default.rgw.buckets.data default.rgw.buckets.non-ec; do
    echo "osd pool create $s3_pool 8 8"
    echo "osd pool application enable $s3_pool rgw"
  done
} | s3_ceph >>"$s3_dir/log/mkfs.log" 2>&1 || s3_fail "creating radosgw's pools failed"
unset s3_pool

if [[ -n ${s3_tls_cert:-} ]]; then
  S3_ENDPOINT=https://${s3_tls_host:?s3_lib: s3_tls_cert needs s3_tls_host}:$s3_port
  s3_curl_tls=(--cacert "${s3_tls_ca:?s3_lib: s3_tls_cert needs s3_tls_ca}")
else
  S3_ENDPOINT=http://127.0.0.1:$s3_port
  s3_curl_tls=()
fi
DENSEFS_TEST_S3_ENDPOINT=$S3_ENDPOINT
AWS_REGION=us-east-1
AWS_DEFAULT_REGION=$AWS_REGION
AWS_ACCESS_KEY_ID=$(s3_random 'A-Z0-9' 20)
AWS_SECRET_ACCESS_KEY=$(s3_random 'A-Za-z0-9' 40)
export S3_ENDPOINT DENSEFS_TEST_S3_ENDPOINT AWS_REGION AWS_DEFAULT_REGION \
  AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY

s3_start
s3_admin user create --uid="${s3_uid:-densefs}" --display-name="densefs test" \
  --access-key="$AWS_ACCESS_KEY_ID" --secret-key="$AWS_SECRET_ACCESS_KEY" \
  >"$s3_dir/log/user.json" 2>>"$s3_dir/log/mkfs.log" || s3_fail "radosgw-admin user create failed"
s3_start_seconds=$(elapsed "$s3_setup_start" "$(now)")
echo "s3: radosgw $(radosgw --version 2>/dev/null | awk '{print $3}') on $S3_ENDPOINT," \
  "cluster and user ready in $s3_start_seconds s"

# For the scripts that share this server (s3_service.sh).
if [[ -n ${s3_service_starting:-} ]]; then
  {
    printf 's3_mon_port=%q\ns3_port=%q\n' "$s3_mon_port" "$s3_port"
    printf 'S3_ENDPOINT=%q\nDENSEFS_TEST_S3_ENDPOINT=%q\n' "$S3_ENDPOINT" "$DENSEFS_TEST_S3_ENDPOINT"
    printf 'AWS_REGION=%q\nAWS_DEFAULT_REGION=%q\n' "$AWS_REGION" "$AWS_DEFAULT_REGION"
    printf 'AWS_ACCESS_KEY_ID=%q\nAWS_SECRET_ACCESS_KEY=%q\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY"
  } >"$s3_dir/env.new"
  chmod 0600 "$s3_dir/env.new"
  mv "$s3_dir/env.new" "$s3_dir/env"
fi
