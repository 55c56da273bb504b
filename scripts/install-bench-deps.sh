#!/usr/bin/env bash
# What `make bench` compares xfer with, if missing: rclone (Debian's). The AWS
# CLI comes with the test tools (scripts/install-python-tools.sh, .tools/venv-s3).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v rclone >/dev/null; then
  sudo=""; [ "$(id -u)" != 0 ] && sudo="sudo"
  echo "installing: rclone"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends rclone
fi
