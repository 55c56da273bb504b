#!/usr/bin/env bash
# Installs the system packages xfer builds and tests with, if missing.
# Checks what is actually needed (headers, commands), so a machine that has
# them from elsewhere is left alone.
set -euo pipefail

need=()
have_header() { [ -f "/usr/include/$1" ] || [ -f "/usr/include/x86_64-linux-gnu/$1" ] || [ -f "/usr/include/aarch64-linux-gnu/$1" ]; }
have_header lmdb.h || need+=(liblmdb-dev)
have_header curl/curl.h || need+=(libcurl4-openssl-dev)
have_header isa-l/crc.h || need+=(libisal-dev)
have_header sqlite3.h || need+=(libsqlite3-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v curl >/dev/null || need+=(curl)
# python3 also runs the tests' link with latency (scripts/delay-proxy.py).
command -v python3 >/dev/null || need+=(python3)
# The end-to-end tests run Python servers (moto, a tus server) in virtual environments.
python3 -c "import venv, ensurepip" 2>/dev/null || need+=(python3-venv)
command -v openssl >/dev/null || need+=(openssl)
# The proxy tests run a real HTTP proxy; the -bin package is the program alone (no service).
command -v tinyproxy >/dev/null || need+=(tinyproxy-bin)
# The media types S3 objects get by their extension (xfer reads /etc/mime.types).
[ -f /etc/mime.types ] || need+=(media-types)
# A one-machine Ceph cluster (scripts/ceph-cluster.sh): a real S3 gateway for tests and benchmarks.
command -v ceph-mon >/dev/null || need+=(ceph-mon)
command -v ceph-osd >/dev/null || need+=(ceph-osd)
command -v radosgw >/dev/null || need+=(radosgw)
command -v ceph >/dev/null || need+=(ceph-common)
# A load balancer with no stickiness in front of several receivers over one object store.
command -v haproxy >/dev/null || need+=(haproxy)
# pgrep: make test's two lanes of end-to-end tests (scripts/test-end-to-end.sh).
command -v pgrep >/dev/null || need+=(procps)

[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then sudo="sudo"; else
    echo "xfer needs: ${need[*]}; run as root or install sudo" >&2; exit 1
  fi
fi
echo "installing: ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
