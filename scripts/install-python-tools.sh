#!/usr/bin/env bash
# Installs the Python programs the end-to-end tests talk to, each in a virtual
# environment of its own under .tools/ (gitignored), if missing:
#   .tools/venv-s3   moto[server] (an S3 server on 127.0.0.1, with crc32c and awscrt so its
#                    CRC-32C and CRC64NVME checksums are right: without awscrt moto stores a
#                    CRC-32 where a CRC64NVME is asked for), boto3 (reads objects back from moto) and the
#                    AWS CLI (`python -m awscli`: reads objects back from Ceph's gateway,
#                    and is what `make bench` measures xfer against)
#   .tools/venv-tus  resumable-upload (a tus 1.0 server) and tuspy (the official tus client)
# The S3 one sees the system's site-packages, so a machine that already has
# moto, boto3 and awscli installs nothing. Tests that need a tool skip nothing: they
# fail with the command to run when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .tools

python=${PYTHON:-python3}

ensure_venv() { # DIR SYSTEM_SITE CHECK_IMPORTS PACKAGES...
  local dir=$1 system_site=$2 check=$3; shift 3
  if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c "$check" 2>/dev/null; then return 0; fi
  echo "installing into $dir: $*"
  if [ "$system_site" = yes ]; then "$python" -m venv --system-site-packages "$dir"; else "$python" -m venv "$dir"; fi
  "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@"
  "$dir/bin/python" -c "$check"
}

ensure_venv .tools/venv-s3 yes "import moto.server, boto3, flask_cors, crc32c, awscrt, awscli" "moto[server,s3crc32c]>=5.0" "boto3" "crc32c" "awscrt" "awscli"
ensure_venv .tools/venv-tus no "import resumable_upload, tusclient" "resumable-upload==0.3.0" "tuspy"
