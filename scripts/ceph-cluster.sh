#!/usr/bin/env bash
# A one-machine Ceph cluster with an S3 gateway on 127.0.0.1, for the tests
# and benchmarks: one monitor, one OSD (bluestore on a sparse file in DIR),
# one RADOS Gateway. No manager daemon (S3 needs none), no authentication
# between the daemons; the gateway checks S3 signatures as usual.
#
#   scripts/ceph-cluster.sh start DIR   starts it (DIR must not hold a running
#                                       cluster); prints "endpoint URL" last
#   scripts/ceph-cluster.sh stop DIR    kills the daemons by their pids (SIGKILL:
#                                       the cluster is thrown away) and removes DIR
#
# S3 credentials: access key XFERCEPHTESTKEY, secret xfer-ceph-test-secret
# (override with CEPH_ACCESS_KEY / CEPH_SECRET_KEY). DIR/env holds
# ENDPOINT=..., and DIR/pids the daemons' pids.
# Needs Debian's ceph-mon, ceph-osd, radosgw and ceph-common (scripts/install-deps.sh).
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
access_key=${CEPH_ACCESS_KEY:-XFERCEPHTESTKEY}
secret_key=${CEPH_SECRET_KEY:-xfer-ceph-test-secret}

stop() {
  if [ -f "$dir/pids" ]; then
    # shellcheck disable=SC2046
    kill -9 $(cat "$dir/pids") 2>/dev/null || true
    for pid in $(cat "$dir/pids"); do
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    done
  fi
  rm -rf "$dir"
}

if [ "$action" = stop ]; then stop; exit 0; fi
[ "$action" = start ] || usage
if [ -f "$dir/pids" ]; then echo "$0: $dir already holds a cluster; stop it first" >&2; exit 1; fi
for tool in monmaptool ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is missing; run scripts/install-deps.sh" >&2; exit 1; }
done

# A failed start leaves nothing running.
trap 'status=$?; if [ $status -ne 0 ]; then echo "$0: start failed; logs in $dir/log" >&2; [ -f "$dir/pids" ] && kill -9 $(cat "$dir/pids") 2>/dev/null; rm -f "$dir/pids"; fi' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mon_port=$(free_port)
rgw_port=$(free_port)
fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
mkdir -p "$dir/mon.a" "$dir/osd.0" "$dir/log" "$dir/run" "$dir/rgw"
conf="$dir/ceph.conf"

cat > "$conf" <<EOF
[global]
fsid = $fsid
# msgr2 only, declared as such: a v1 client would hang in "authenticate timed out".
mon host = [v2:127.0.0.1:$mon_port]
auth cluster required = none
auth service required = none
auth client required = none
# With authentication off the connections must still allow crc, and a keyring
# must be named (its keys are not checked), or the gateway cannot log in (-13).
ms mon client mode = crc
ms client mode = crc
ms service mode = crc
ms cluster mode = crc
ms mon service mode = crc
ms mon cluster mode = crc
keyring = $dir/keyring
# One OSD: pools of one copy and few placement groups, or the gateway's pools cannot be created.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
mon max pg per osd = 1000
mon allow pool size one = true
osd crush chooseleaf type = 0
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
log to stderr = false
err to stderr = false
mon cluster log file = $dir/log/cluster.log
[mon]
mon data = $dir/mon.\$id
# Every pool the gateway creates waits for a proposal; the default 1 s makes start-up ~13 s.
paxos propose interval = 0.05
[osd]
osd data = $dir/osd.\$id
# Bluestore on a sparse file: disk use equals the data written, and the OSD's
# memory stays small (memstore would keep every object in RAM).
osd objectstore = bluestore
bluestore block path = $dir/osd.\$id/block.img
bluestore block create = true
bluestore block size = 21474836480
bluestore fsck on mkfs = false
bluestore cache size = 268435456
osd memory target = 939524096
[client.rgw.xfer]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
rgw data = $dir/rgw
# Deleted objects' data is freed within seconds, not the default two hours:
# tests and benchmarks delete what they wrote to keep the disk used small.
rgw gc obj min wait = 5
rgw gc processor period = 10
EOF

ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring"

# Foreground daemons in the background, so their pids are the ones to kill.
# Their output goes to a file, and they keep no other descriptor of ours: a
# caller waiting for the end of our output, or of a descriptor it gave us
# (Foundation's Process learns of a child's exit when a socket the child
# inherits closes), would otherwise wait as long as the cluster runs.
daemon() { # LOG COMMAND...
  local log=$1; shift
  (
    for path in /proc/self/fd/*; do
      fd=${path##*/}
      if [ "$fd" -gt 2 ]; then exec {fd}>&-; fi
    done
    exec "$@" </dev/null >>"$log" 2>&1
  ) &
}

daemon "$dir/log/mon.out" ceph-mon -c "$conf" -i a -f
echo $! > "$dir/pids"

osd_uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
osd_id=$(ceph -c "$conf" --connect-timeout 30 osd new "$osd_uuid")
ceph-osd -c "$conf" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >/dev/null 2>&1
daemon "$dir/log/osd.out" ceph-osd -c "$conf" -i "$osd_id" -f
echo $! >> "$dir/pids"

daemon "$dir/log/rgw.out" radosgw -c "$conf" -n client.rgw.xfer -f
echo $! >> "$dir/pids"

# The gateway answers once its pools exist; wait for that, up to a minute.
for _ in $(seq 600); do
  if curl -s -o /dev/null "http://127.0.0.1:$rgw_port/"; then break; fi
  for pid in $(cat "$dir/pids"); do
    kill -0 "$pid" 2>/dev/null || { echo "$0: a daemon (pid $pid) exited" >&2; exit 1; }
  done
  sleep 0.1
done
curl -s -o /dev/null "http://127.0.0.1:$rgw_port/" || { echo "$0: the gateway did not answer in 60 s" >&2; exit 1; }

radosgw-admin -c "$conf" -n client.rgw.xfer user create --uid=xfer --display-name=xfer \
  --access-key="$access_key" --secret-key="$secret_key" >/dev/null 2>"$dir/log/user-create.log"

echo "ENDPOINT=http://127.0.0.1:$rgw_port" > "$dir/env"
echo "endpoint http://127.0.0.1:$rgw_port"
