#!/usr/bin/env bash
# Fails when the public API of the engine's library products broke since the
# last release tag (Docs/backend-guide.md, "Versions and the API check").
#
# swift-api-digester (in the toolchain) compares the modules of the last tag,
# built in a baseline folder, with the working tree's. A break that is meant
# (a new case of an enum that may gain cases, a 0.x minor release) is named,
# message for message, in api-breakage-allowlist.txt and in CHANGELOG.md; the
# allowlist empties at each release.
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT="${SWIFT:-swift}"

baseline="${API_BASELINE:-$(git describe --tags --abbrev=0 --match '[0-9]*.[0-9]*.[0-9]*' 2>/dev/null || true)}"
if [ -z "$baseline" ]; then
  echo "api-check: no release tag (N.N.N) in this clone; fetch the tags (git fetch --tags) or set API_BASELINE=REV" >&2
  exit 2
fi

# The products an app or a backend author depends on; the repository's own
# test helpers and the example are not promised to anyone.
products=(Xfer XferBackendTesting XferPrimitives XferPatch XferMultipart XferSequence XferS3 XferTus XferIETF)

echo "api-check: the public API of ${products[*]} against $baseline"
allowlist=()
[ -s api-breakage-allowlist.txt ] && allowlist=(--breakage-allowlist-path api-breakage-allowlist.txt)
# The working tree's modules come from the build folder `make test` used (API_SCRATCH), so
# only the tag's package is built afresh.
scratch=()
[ -n "${API_SCRATCH:-}" ] && scratch=(--scratch-path "$API_SCRATCH")
"$SWIFT" package "${scratch[@]}" diagnose-api-breaking-changes "$baseline" --products "${products[@]}" \
  --baseline-dir "${API_BASELINE_DIR:-${API_SCRATCH:-.build}/api-baseline}" "${allowlist[@]}"
