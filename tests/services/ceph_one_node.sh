# shellcheck shell=bash
# The configuration of a private one-node Ceph cluster that serves S3
# through radosgw: one monitor on 127.0.0.1, one BlueStore OSD whose disk is
# a sparse file (it takes what is written), radosgw's beast frontend; every
# daemon logs to a file of its own. Used by tests/mount/s3_lib.sh (the
# tests' S3 server); the reasons for each setting are in
# docs/s3-test-server.md. Sourced; defines a function only.
#
# ceph_one_node_conf STATE FSID MON_PORT RGW_ENDPOINT DISK_BYTES
#   STATE         the cluster's directory: keyring, run/, crash/, mon/,
#                 osd.0/ and its disk file, rgw/, log/
#   FSID          the cluster's id (a UUID)
#   MON_PORT      the monitor's port on 127.0.0.1
#   RGW_ENDPOINT  where radosgw listens, ADDRESS:PORT
#   DISK_BYTES    the size of the OSD's sparse disk file
#   CERT KEY      optional: PEM files of radosgw's certificate and key; it
#                 then serves https (only) on RGW_ENDPOINT
# Prints the file.
ceph_one_node_conf() {
  local state=$1 fsid=$2 mon_port=$3 rgw_endpoint=$4 disk_bytes=$5 cert=${6:-} key=${7:-}
  local frontends="beast endpoint=$rgw_endpoint"
  [[ -z $cert ]] || frontends="beast ssl_endpoint=$rgw_endpoint ssl_certificate=$cert ssl_private_key=$key"
  # One OSD holds every placement group, so pools have one replica; no
  # manager daemon runs (nothing needs one: pg autoscaling is off, pools
  # are created with a fixed pg count).
  cat <<EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$mon_port
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $state/keyring
run dir = $state/run
admin socket = $state/run/\$name.asok
pid file = $state/run/\$name.pid
crash dir = $state/crash
log file = $state/log/\$name.log
mon cluster log file = $state/log/cluster.\$channel.log
log to stderr = false
err to stderr = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
# The monitor shuts itself down when its disk is 95% full (default 5): a
# machine's disk may well be that full with room to spare.
mon data avail crit = 1
mon data avail warn = 2
# The monitor batches map changes for 1 s (default) before it commits them;
# every pool creation waits for one commit. One client, no load: commit
# at once.
paxos propose interval = 0.05
# radosgw watches objects in its control pool and notifies every watcher
# when bucket or user metadata changes. A radosgw killed with -9 leaves its
# watches behind until the OSD times them out (default 30 s), and until
# then every bucket creation or deletion waits for it (measured: 29 s).
# Clients ping their watches every objecter tick (default 5 s): tick each
# second, time out after 5 (one radosgw: a watch that times out under load
# is only set up again).
osd client watch timeout = 5
objecter tick interval = 1

[mon]
mon data = $state/mon

[osd]
keyring = $state/osd.\$id/keyring
osd data = $state/osd.\$id
osd objectstore = bluestore
bluestore block path = $state/osd.\$id.block
bluestore block create = true
bluestore block size = $disk_bytes
bluestore fsck on mkfs = false
bluestore fsck on mount = false
# A small fixed cache instead of the default 4 GiB memory target.
bluestore cache autotune = false
bluestore cache size = 134217728
osd memory target = 939524096
# radosgw's object names are long (filestore's old defaults are lower)
osd max object name len = 460
osd max object namespace len = 64

[client.rgw]
rgw frontends = $frontends
rgw data = $state/rgw
rgw thread pool size = 64
EOF
}
