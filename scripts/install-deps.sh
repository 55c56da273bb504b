#!/usr/bin/env bash
# Installs the system packages xfer needs, if missing, for one purpose:
#   install-deps.sh build   what building the engine and `xfer` needs (and `make demo`
#                           runs: a push to a local `xfer serve`, killed and resumed)
#   install-deps.sh test    that and what `make test` runs against: Ceph, haproxy,
#                           tinyproxy, Chromium, SQLite (the store benchmark), Python's venv,
#                           lintian and bubblewrap (the package's tests)...
# Checks what is actually needed (headers, commands), so a machine that has
# them from elsewhere is left alone.
set -euo pipefail
purpose="${1:-test}"
case "$purpose" in build|test) ;; *) echo "usage: install-deps.sh build|test" >&2; exit 2 ;; esac

need=()
have_header() { [ -f "/usr/include/$1" ] || [ -f "/usr/include/x86_64-linux-gnu/$1" ] || [ -f "/usr/include/aarch64-linux-gnu/$1" ]; }

# The engine's C libraries, found by pkg-config.
have_header lmdb.h || need+=(liblmdb-dev)
have_header curl/curl.h || need+=(libcurl4-openssl-dev)
have_header isa-l/crc.h || need+=(libisal-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
# The demo checks what the receiver serves with curl and sha256sum, and waits with python3.
command -v curl >/dev/null || need+=(curl)
command -v python3 >/dev/null || need+=(python3)
# `make deb` and `make dist` (scripts/make-deb.sh): the package's Depends from the libraries the
# binary loads (dpkg-shlibdeps), and the binary stripped with its symbols kept apart (strip,
# objcopy); readelf and nm: what the linkage test's app links and holds (scripts/test-linkage.sh);
# ld.gold: swiftc's linker, with the identical-code folding of the release link (Makefile, RELEASE_FLAGS).
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
for tool in strip objcopy readelf nm ld.gold; do command -v "$tool" >/dev/null || { need+=(binutils); break; }; done

if [ "$purpose" = test ]; then
  # The store benchmark's other store (xfer-store-bench; built with the root package).
  have_header sqlite3.h || need+=(libsqlite3-dev)
  # The end-to-end tests run Python servers (moto, a tus server) in virtual environments;
  # python3 also runs the tests' link with latency (scripts/delay-proxy.py).
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
  # A real browser for the upload page's test (UploadPageTests: headless, driven over a pipe).
  command -v chromium >/dev/null || need+=(chromium)
  # pgrep: make test's two lanes of end-to-end tests (scripts/test-end-to-end.sh).
  command -v pgrep >/dev/null || need+=(procps)
  # The package's checks (PackagingTests, make test-dist): Debian's own verdict on the .deb, and
  # the release binary run with the Swift toolchain hidden under an empty directory.
  command -v lintian >/dev/null || need+=(lintian)
  command -v bwrap >/dev/null || need+=(bubblewrap)
  # systemd-analyze verify: the receiver's unit (PackagingTests). The package alone, no init.
  command -v systemd-analyze >/dev/null || need+=(systemd)
fi

# DRY_RUN=1 prints what would be installed (InstallDepsTests).
if [ -n "${DRY_RUN:-}" ]; then echo "${need[*]}"; exit 0; fi
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
