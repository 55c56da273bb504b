#!/usr/bin/env bash
# What `make bench` compares xfer with, if missing: rclone (Debian's) and the
# AWS CLI (into .tools/venv-s3, next to moto).
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
