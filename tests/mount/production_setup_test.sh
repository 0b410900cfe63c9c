#!/usr/bin/env bash
# docs/production.md, word for word: every `sh` block that follows a
# `<!-- run on: MACHINES -->` comment runs, in the page's order, as root on
# each machine it names, with `bash -euo pipefail` from /root. Then the
# test checks what the page promises and the errors its table shows.
#
# The machines: db, s3, client1 and client2 are mount namespaces of one
# network namespace of this test's own (so the servers take the page's
# ports, 5432 and 443), each with a private copy of /etc and its own /root,
# /mnt and /var/cache; /etc/hosts names db.example.org and s3.example.org
# (127.0.0.1). db gets a fresh cluster from Debian's pg_createcluster; s3 is
# radosgw on a private one-node Ceph cluster (s3_lib.sh) serving https on
# 443, and its /etc/ceph/ceph.conf names that cluster; the clients get this
# build's densefs in /usr/local/bin and systemctl_stand_in.sh as systemctl
# (systemd is not PID 1 here: docs/production.md, "How this page is
# tested").
#
# What a person does by hand, the test does between the blocks: a CA and
# the servers' certificates (openssl), given to the machines as the page
# says, and the bracketed secrets filled in from the files the page made.
# usage: production_setup_test.sh DENSEFS_BINARY SOURCE_DIR
set -euo pipefail

# A network and mount namespace of its own, before anything else: the
# servers listen on the page's ports, and nothing here touches the host's
# /etc, /usr/local or mounts.
if [[ -z ${DENSEFS_PRODUCTION_TEST_NAMESPACES:-} ]]; then
  [[ $(id -u) -eq 0 ]] || {
    echo "SKIP: mount tests run as root" >&2
    exit 77
  }
  exec unshare --mount --net --propagation private \
    env DENSEFS_PRODUCTION_TEST_NAMESPACES=1 bash "$0" "$@"
fi

# shellcheck source=mount_lib.sh
source "$(dirname "$0")/mount_lib.sh"
page=$src/docs/production.md
[[ -f $page ]] || fail "no $page"
for tool in pg_createcluster pg_ctlcluster psql openssl jq nsenter unshare systemd-analyze mount.fuse3; do
  command -v "$tool" >/dev/null || missing_tool "$tool"
done
ip link set lo up || fail "ip link set lo up failed in the test's network namespace"

# --- The names, the CA and the certificates. --------------------------------
printf '127.0.0.1 localhost db.example.org s3.example.org\n::1 localhost\n' >"$work/hosts"
mount --bind "$work/hosts" /etc/hosts
pki=$work/pki
mkdir -m 0700 "$pki"
# make_ca NAME, make_cert CA HOST: a CA, and a server certificate it signs
# for HOST (subjectAltName: verify-full and curl check the name there).
make_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" \
    -keyout "$pki/$1.key" -out "$pki/$1.crt" 2>/dev/null || fail "openssl: CA $1"
}
make_cert() {
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$pki/$2.key" \
    -out "$pki/$2.csr" 2>/dev/null || fail "openssl: key for $2"
  openssl x509 -req -in "$pki/$2.csr" -CA "$pki/$1.crt" -CAkey "$pki/$1.key" \
    -CAcreateserial -days 2 -extfile <(printf 'subjectAltName=DNS:%s\n' "$2") \
    -out "$pki/$2.crt" 2>/dev/null || fail "openssl: certificate for $2"
}
make_ca example-ca
make_ca other-ca # a CA that signed neither server: the errors' checks
make_cert example-ca db.example.org
make_cert example-ca s3.example.org

# on MACHINE CMD...: CMD as root on MACHINE, as a login there would run it.
on() {
  local machine=$1
  shift
  nsenter --target "${machine_pid[$machine]:-0}" --mount -- env -i HOME=/root LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
# give MACHINE FILE DEST: a file handed over to MACHINE (as scp would).
give() { on "$1" install -m "${4:-0600}" "$2" "$3"; }

# Everything the machines started goes at exit, before s3_lib.sh's cleanup
# and $work: the mounts (their daemons flush and exit), then PostgreSQL.
cleanup_machines() {
  local rc=$? machine
  set +e # its status, returned below, must not end the trap before the next cleanup
  for machine in client1 client2; do
    if on "$machine" mountpoint -q /mnt/vol1 2>/dev/null; then
      on "$machine" umount /mnt/vol1 2>/dev/null || on "$machine" umount -l /mnt/vol1 2>/dev/null || true
    fi
  done
  pkill -KILL -f "densefs postgresql://densefs@db.example.org/vol1" 2>/dev/null || true
  on db pg_ctlcluster 15 main stop -m immediate >/dev/null 2>&1 || true
  # The namespaces' own mounts go with their last process.
  for machine in "${!machine_pid[@]}"; do kill "${machine_pid[$machine]}" 2>/dev/null || true; done
  return "$rc" # the test's status, for the cleanups after this one
}

# --- The machines. ----------------------------------------------------------
# Each is a mount namespace kept by a process of its own that only sleeps
# (`on` enters it by that process). Not by a bind of its nsfs file
# (unshare --mount=FILE): in CI on this VM the kernel refused that bind
# with EINVAL in some runs and not in others, under /var/tmp and under a
# private tmpfs in /run alike, cause unknown.
declare -A machine_pid=()
work_exit_trap=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT\$/\\1/")
# shellcheck disable=SC2064 # mount_lib.sh's trap, expanded now
trap "cleanup_machines; $work_exit_trap" EXIT
# This build's densefs, where the package puts it for mount.fuse3; the
# systemctl stand-in ahead of systemd's on the machines' PATH.
mount -t tmpfs -o mode=0755 densefs-test-bin /usr/local/bin
ln -s "$densefs" /usr/local/bin/densefs
mount -t tmpfs -o mode=0755 densefs-test-sbin /usr/local/sbin
printf '#!/bin/sh\nexec bash %q "$@"\n' "$src/tests/mount/systemctl_stand_in.sh" >/usr/local/sbin/systemctl
chmod 0755 /usr/local/sbin/systemctl
machines=(db s3 client1 client2)
for machine in "${machines[@]}"; do
  mkdir -p "$work/etc-$machine"
  cp -a /etc/. "$work/etc-$machine/"
  # No cluster yet (this machine's own would be in the copy): db makes a
  # fresh one below, as installing postgresql does.
  rm -rf "$work/etc-$machine/postgresql/"[0-9]*
  # shellcheck disable=SC2016 # expanded by the machine's shell
  unshare --mount --propagation private bash -euc '
    mount --bind "$1" /etc
    for dir in /root /mnt /var/cache /var/lib/postgresql /var/log/postgresql /run/postgresql; do
      [[ -d $dir ]] || continue
      mount -t tmpfs -o mode=0755 "densefs-test-$2" "$dir"
    done
    chmod 0700 /root
    mkdir -p /var/cache/densefs
    chown postgres:postgres /var/lib/postgresql /var/log/postgresql /run/postgresql 2>/dev/null || true
    touch "$3"
    exec sleep infinity
  ' machine "$work/etc-$machine" "$machine" "$work/$machine.ready" </dev/null >"$work/$machine.log" 2>&1 &
  machine_pid[$machine]=$!
  for _ in $(seq 100); do
    [[ -e $work/$machine.ready ]] && break
    kill -0 "${machine_pid[$machine]}" 2>/dev/null || break
    sleep 0.1
  done
  [[ -e $work/$machine.ready ]] || fail "making machine $machine failed: $(cat "$work/$machine.log")"
done

# --- The servers: a fresh Debian PostgreSQL, radosgw with TLS on 443. -------
on db pg_createcluster 15 main --start >"$work/pg_createcluster.log" 2>&1 ||
  fail "pg_createcluster 15 main on db failed: $(tail -n 5 "$work/pg_createcluster.log")"

# shellcheck disable=SC2034 # read by s3_lib.sh
{
  s3_private=1 s3_port=443 s3_uid=test-admin s3_tls_host=s3.example.org
  s3_tls_cert=$pki/s3.example.org.crt s3_tls_key=$pki/s3.example.org.key s3_tls_ca=$pki/example-ca.crt
}
# shellcheck source=s3_lib.sh
source "$src/tests/mount/s3_lib.sh"
# The page's own keys come from its block; none of the test's may leak in.
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
# At exit: the machines' mounts and PostgreSQL first (while S3 still
# answers their last flush), then the S3 cluster, then mount_lib.sh's $work.
s3_prev_exit_trap=$work_exit_trap
trap "cleanup_machines; cleanup_s3" EXIT
on s3 install -m 0644 "$s3_conf" /etc/ceph/ceph.conf

# --- The page, block by block. ----------------------------------------------
# blocks.tsv: MACHINES, then the block's text with its newlines as \n.
python3 - "$page" >"$work/blocks.tsv" <<'EOF' || fail "reading the blocks of $page failed"
import re, sys
text = open(sys.argv[1]).read()
for m in re.finditer(r"<!-- run on: ([a-z0-9 ]+) -->\n```sh\n(.*?)```\n", text, re.S):
    print(m.group(1).strip() + "\t" + m.group(2).replace("\\", "\\\\").replace("\n", "\\n"))
EOF
blocks=$(wc -l <"$work/blocks.tsv")
((blocks >= 8)) || fail "$page has $blocks blocks to run, fewer than the 8 of its steps"
unannotated=$(grep -c '^```sh$' "$page") || true
((unannotated == blocks)) ||
  fail "$page has $unannotated sh blocks but $blocks under a 'run on:' comment: every block is run"

# secret NAME: the value a person would copy for a bracketed secret.
secret() {
  case $1 in
    "db password") on db cat /root/vol1-db-password ;;
    "access key") on s3 jq -r '.keys[0].access_key' /root/densefs-s3-user.json ;;
    "secret key") on s3 jq -r '.keys[0].secret_key' /root/densefs-s3-user.json ;;
    *) fail "$page asks for '<$1>', which this test does not know how to fill in" ;;
  esac
}

bracketed='<([a-z][a-z ]*)>'
given_db=0 given_clients=0 index=0
while IFS=$'\t' read -r where body; do
  index=$((index + 1))
  block=$(printf '%b' "$body")
  # The bracketed secrets, filled in as a person would.
  while [[ $block =~ $bracketed ]]; do
    name=${BASH_REMATCH[1]}
    value=$(secret "$name") || fail "no value for <$name>"
    block=${block//<$name>/$value}
  done
  for machine in $where; do
    case $machine in
      db)
        if ((given_db == 0)); then
          give db "$pki/db.example.org.crt" /root/db.example.org.crt 0644
          give db "$pki/db.example.org.key" /root/db.example.org.key
          given_db=1
        fi
        ;;
      s3) ;;
      client1 | client2)
        if ((given_clients == 0)); then
          give client1 "$pki/example-ca.crt" /root/ca.crt 0644
          give client2 "$pki/example-ca.crt" /root/ca.crt 0644
          given_clients=1
        fi
        ;;
      *) fail "block $index of $page runs on '$machine', which is none of: ${machines[*]}" ;;
    esac
    echo "--- block $index on $machine"
    if ! on "$machine" bash -euo pipefail -c "cd /root && $block" >"$work/block-$index-$machine.out" 2>&1; then
      cat "$work/block-$index-$machine.out" >&2
      fail "block $index of $page failed on $machine"
    fi
    cat "$work/block-$index-$machine.out"
  done
done <"$work/blocks.tsv"

# --- What the page promises. ------------------------------------------------
volume=postgresql://densefs@db.example.org/vol1
# as_client MACHINE CMD...: CMD with the environment file the unit reads.
as_client() {
  local machine=$1
  shift
  # shellcheck disable=SC2016 # expanded by the machine's shell
  on "$machine" bash -euo pipefail -c 'set -a; . /etc/densefs/vol1.env; set +a; "$@"' client "$@"
}

for machine in client1 client2; do
  for file in vol1.env vol1.pgpass; do
    mode=$(on "$machine" stat -c '%a %U' "/etc/densefs/$file")
    [[ $mode == "600 root" ]] || fail "$machine: /etc/densefs/$file is '$mode', not 600 root"
  done
  [[ $(on "$machine" systemctl is-active mnt-vol1.mount) == active ]] ||
    fail "$machine: mnt-vol1.mount is not mounted"
  on "$machine" test -L /etc/systemd/system/remote-fs.target.wants/mnt-vol1.mount ||
    fail "$machine: enable made no remote-fs.target.wants link"
done
last=$index
grep -q "^written on .* at " "$work/block-$last-client2.out" ||
  fail "client2 did not read the file client1 wrote (block $last: $(head -c 300 "$work/block-$last-client2.out"))"

status=$(as_client client1 densefs status --json "$volume") || fail "densefs status --json failed"
alive=$(jq '[.sessions[] | select(.alive and (.read_only | not))] | length' <<<"$status")
[[ $alive == 2 ]] || fail "densefs status shows $alive live writers, not 2: $status"

# Both machines write; each reads what the other wrote, after close.
head -c 3000000 /dev/urandom >"$work/big.bin"
on client1 cp "$work/big.bin" /mnt/vol1/from-client1.bin
on client2 cp "$work/big.bin" /mnt/vol1/from-client2.bin
on client2 cmp /mnt/vol1/from-client1.bin "$work/big.bin" || fail "client2 read client1's file wrong"
on client1 cmp /mnt/vol1/from-client2.bin "$work/big.bin" || fail "client1 read client2's file wrong"
on client1 sync -f /mnt/vol1/from-client1.bin

# df: the volume's pack objects (docs/scale-out.md: what this client
# listed at mount plus its own uploads, which the sync made), not the
# client's disk.
df_kb=$(on client1 df -k --output=used /mnt/vol1 | tail -n 1 | tr -d ' ')
if ! [[ $df_kb =~ ^[0-9]+$ ]] || ((df_kb < 2900)); then
  fail "df on client1 shows '$df_kb' KiB used, not the 3 MB it uploaded"
fi

# --- The errors the page's table shows, each one line with its fix. ---------
# expect_error WHAT PATTERN CMD...: CMD fails and its output matches.
expect_error() {
  local what=$1 pattern=$2 out
  shift 2
  if out=$("$@" 2>&1); then fail "$what: succeeded"; fi
  grep -qE -- "$pattern" <<<"$out" || fail "$what: the error is not the page's: $out"
  echo "error ($what): $(head -n 1 <<<"$out")"
}
give client1 "$pki/other-ca.crt" /root/other-ca.crt 0644
expect_error "plain TCP to PostgreSQL" 'pg_hba.conf rejects connection.*no encryption' \
  as_client client1 env PGSSLMODE=disable densefs status "$volume"
expect_error "PostgreSQL's certificate from another CA" 'certificate verify failed' \
  as_client client1 env PGSSLROOTCERT=/root/other-ca.crt densefs status "$volume"
on client1 bash -c 'umask 077 && sed "s/:[^:]*\$/:not-the-password/" /etc/densefs/vol1.pgpass >/root/wrong.pgpass'
expect_error "a wrong database password" 'password authentication failed for user "densefs"' \
  as_client client1 env PGPASSFILE=/root/wrong.pgpass densefs status "$volume"
# S3's certificate: mkfs of a second volume reaches S3 (its bucket) first.
on db runuser -u postgres -- createdb --owner=densefs vol2
on client1 bash -c 'umask 077 && sed "s/:vol1:/:vol2:/" /etc/densefs/vol1.pgpass >/root/vol2.pgpass'
mkfs_vol2=(densefs mkfs --meta postgresql://densefs@db.example.org/vol2
  --data 's3://densefs-vol2?endpoint=https://s3.example.org' /var/tmp/vol2-refused)
expect_error "S3's certificate from another CA" 'AWS_CA_BUNDLE to that CA' \
  as_client client1 env PGPASSFILE=/root/vol2.pgpass AWS_CA_BUNDLE=/root/other-ca.crt "${mkfs_vol2[@]}"
expect_error "a missing CA file" 'AWS_CA_BUNDLE /root/none.crt: No such file or directory' \
  as_client client1 env PGPASSFILE=/root/vol2.pgpass AWS_CA_BUNDLE=/root/none.crt "${mkfs_vol2[@]}"
on client2 mkdir /root/second
expect_error "a second writer without shared" 'mount every writer -o shared' \
  as_client client2 densefs mount "$volume" /root/second -o cache_dir=/root/cache

# --- Stopped as systemd stops them; the volume checks clean. ----------------
for machine in client1 client2; do
  on "$machine" systemctl stop mnt-vol1.mount || fail "$machine: systemctl stop failed"
done
for ((i = 0; i < 300; i++)); do
  pgrep -f "densefs postgresql://densefs@db.example.org/vol1" >/dev/null || break
  sleep 0.1
done
pgrep -f "densefs postgresql://densefs@db.example.org/vol1" >/dev/null &&
  fail "a densefs daemon is still running 30 s after its unmount"
as_client client1 densefs fsck "$volume" >"$work/fsck.out" 2>&1 || {
  cat "$work/fsck.out" >&2
  fail "fsck of the volume after both unmounts failed"
}
echo "PASS: docs/production.md ran as written ($blocks blocks on 4 machines); both clients wrote and read each other's files; $(tail -n 1 "$work/fsck.out")"
