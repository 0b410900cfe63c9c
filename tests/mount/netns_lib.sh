# shellcheck shell=bash
# netns_server_net is for the caller; work comes from mount_lib.sh.
# shellcheck disable=SC2034,SC2154
# A client one network hop from its servers, for partitions: a network
# namespace joined to this one by a veth pair, the servers on an address
# of this side's loopback that the namespace reaches over the link only.
# Setting the link down cuts the namespace's client off; a client on this
# side reaches the servers without it. Sourced after mount_lib.sh (and
# before postgres_lib.sh and s3_lib.sh, whose servers must listen on
# netns_server_ip). Needs root, ip and nsenter.
#
#   netns_up PREFIX   PREFIX.7.1 here, PREFIX.7.2 in the namespace, the
#                     servers' address PREFIX.8.1 (netns_server_ip);
#                     PREFIX is two octets of 10.0.0.0/8 ("10.201") that
#                     nothing else on the machine uses
#   in_ns CMD...      runs CMD in the namespace (a densefs mount there
#                     talks to the servers over the link)
#   netns_cut, netns_heal
#                     the link down, and up again
#   fsync_writer SENT DEST LOG STOP
#                     until the file STOP exists: a new 100 KB file every
#                     0.2 s, kept as SENT/N and copied to DEST/N with an
#                     fsync (run it in the background, DEST on the cut
#                     client); a line per file in LOG, "N START END ok" or
#                     "N START END ERROR"
#   check_fsynced SENT DEST LOG
#                     fails unless every file whose fsync LOG says succeeded
#                     is exact in DEST (after a remount); sets fsynced_exact
#                     to their number
# Everything goes at exit (after the EXIT trap set before netns_up).

netns_up() {
  local prefix=$1
  netns_name=densefs-net-$$
  netns_host_dev=dfh$$
  netns_server_ip=$prefix.8.1
  netns_server_net=$prefix.0.0/16
  # First: whatever the steps below made goes at exit, even if one fails.
  netns_prev_exit_trap=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT\$/\\1/")
  trap netns_down EXIT
  ip netns add "$netns_name" 2>"$work/netns.err" ||
    skip "cannot make a network namespace here (root without CAP_NET_ADMIN?): $(cat "$work/netns.err")"
  ip link add "$netns_host_dev" type veth peer name "dfn$$"
  ip link set "dfn$$" netns "$netns_name"
  ip addr add "$prefix.7.1/24" dev "$netns_host_dev"
  ip link set "$netns_host_dev" up
  ip addr add "$netns_server_ip/32" dev lo
  ip netns exec "$netns_name" ip addr add "$prefix.7.2/24" dev "dfn$$"
  ip netns exec "$netns_name" ip link set "dfn$$" up
  ip netns exec "$netns_name" ip link set lo up
  ip netns exec "$netns_name" ip route add default via "$prefix.7.1"
}

in_ns() { nsenter --net="/run/netns/$netns_name" "$@"; }
netns_cut() { ip link set "$netns_host_dev" down; }
netns_heal() { ip link set "$netns_host_dev" up; }

netns_down() {
  local rc=$? m
  set +e
  # Runs after the servers' cleanups (installed later, so run earlier): a
  # daemon in the namespace may still wait for them; its mounts go lazily
  # if need be.
  for m in "$work"/*.mnt; do
    mountpoint -q "$m" 2>/dev/null && { umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; }
  done
  ip netns del "$netns_name" 2>/dev/null
  ip link del "$netns_host_dev" 2>/dev/null
  ip addr del "$netns_server_ip/32" dev lo 2>/dev/null
  (exit "$rc")
  eval "$netns_prev_exit_trap"
  return "$rc"
}

fsync_writer() {
  local sent=$1 dest=$2 log=$3 stop=$4 i=0 start err
  while [[ ! -e $stop ]]; do
    i=$((i + 1))
    head -c 100000 /dev/urandom >"$sent/$i"
    start=$(now)
    if err=$(dd if="$sent/$i" of="$dest/$i" bs=64k conv=fsync status=none 2>&1); then
      echo "$i $start $(now) ok" >>"$log"
    else
      echo "$i $start $(now) ${err//$'\n'/ }" >>"$log"
    fi
    sleep 0.2
  done
}

check_fsynced() {
  local sent=$1 dest=$2 log=$3 i state
  fsynced_exact=0
  while read -r i _ _ state; do
    [[ $state == ok ]] || continue
    cmp -s "$sent/$i" "$dest/$i" || fail "$dest/$i: its fsync succeeded, but it differs after the remount"
    fsynced_exact=$((fsynced_exact + 1))
  done <"$log"
}
