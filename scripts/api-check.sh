#!/usr/bin/env bash
# Fails when the public API of the engine's library products broke since the
# last release (Docs/backend-guide.md, "Versions and the API check").
#
#   scripts/api-check.sh                  compare the working tree with the newest API/N.N.N
#   scripts/api-check.sh --record N.N.N   write the working tree's API as release N.N.N
#
# Each release's public API is kept in the repository (API/N.N.N/<Module>.json.gz,
# dumps of the toolchain's swift-api-digester), not rebuilt from a git tag: a
# clone without tags or history (what CI checks out) can still be checked, and
# no old package is built. A break that is meant (a new case of an enum that
# may gain cases, a 0.x minor release) is named, message for message, in
# api-breakage-allowlist.txt and in CHANGELOG.md; the allowlist empties at each
# release.
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT="${SWIFT:-swift}"
scratch="${API_SCRATCH:-.build}"

# The products an app or a backend author depends on; the repository's own
# test helpers and the example are not promised to anyone.
modules=(Xfer XferBackendTesting XferPrimitives XferWire XferPatch XferMultipart XferSequence XferS3 XferS3Core XferTus XferIETF)

record=""
case "${1:-}" in
  --record)
    record="${2:-}"
    [[ "$record" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "api-check: --record needs a version N.N.N, not '${record}'" >&2; exit 2; } ;;
  "") ;;
  *) echo "api-check: unknown argument '$1' (use --record N.N.N or nothing)" >&2; exit 2 ;;
esac

digester="$(dirname "$(readlink -f "$(command -v "$SWIFT")")")/swift-api-digester"
[ -x "$digester" ] || digester="$(command -v swift-api-digester || true)"
[ -n "$digester" ] || { echo "api-check: swift-api-digester is not beside $SWIFT; use a full Swift toolchain" >&2; exit 2; }

# The working tree's modules, built where `make test` built them (API_SCRATCH):
# after it, nothing is compiled again.
"$SWIFT" build --scratch-path "$scratch" >/dev/null
bin="$(readlink -f "$("$SWIFT" build --scratch-path "$scratch" --show-bin-path)")"

# What the compiler would see: the built Swift modules and every C module map
# (ours under Sources/, the generated ones of dependencies beside their objects).
search=(-I "$bin/Modules")
for map in "$bin"/*.build/module.modulemap Sources/*/module.modulemap; do
  [ -f "$map" ] && search+=(-Xcc "-fmodule-map-file=$(readlink -f "$map")")
done
for dir in Sources/*/include; do
  [ -d "$dir" ] && search+=(-I "$(readlink -f "$dir")")
done
target="$("$SWIFT" -print-target-info | sed -n 's/.*"triple": "\(.*\)".*/\1/p' | head -1)"

if [ -n "$record" ]; then
  out="API/$record"
  mkdir -p "$out"
  for module in "${modules[@]}"; do
    # No paths of this machine in what is committed.
    "$digester" -dump-sdk -module "$module" -target "$target" "${search[@]}" \
      -avoid-location -avoid-tool-args -abort-on-module-fail -o "$out/$module.json"
    gzip -9 -n -f "$out/$module.json"
  done
  echo "api-check: recorded the public API of ${#modules[@]} modules in $out"
  exit 0
fi

release="$(ls -1 API 2>/dev/null | grep -E '^[0-9]+\.[0-9]+\.[0-9]+$' | sort -V | tail -1 || true)"
[ -n "$release" ] || { echo "api-check: no release recorded under API/ (scripts/api-check.sh --record N.N.N)" >&2; exit 2; }
echo "api-check: the public API of ${modules[*]} against release $release"

unpacked="$scratch/api-baseline/$release"
mkdir -p "$unpacked"
allowlist=()
[ -s api-breakage-allowlist.txt ] && allowlist=(-breakage-allowlist-path "$(readlink -f api-breakage-allowlist.txt)")

broken=0
for module in "${modules[@]}"; do
  baseline="API/$release/$module.json.gz"
  if [ ! -f "$baseline" ]; then
    echo "api-check: $module is new since $release (nothing to compare)"
    continue
  fi
  gzip -dc "$baseline" > "$unpacked/$module.json"
  # -compiler-style-diags: one "error: API breakage: …" line per break, at the
  # declaration, and exit 1 when there is one not on the allowlist.
  if "$digester" -diagnose-sdk -compiler-style-diags -abort-on-module-fail \
      -baseline-path "$unpacked/$module.json" -module "$module" -target "$target" \
      "${search[@]}" "${allowlist[@]}" >"$unpacked/$module.out" 2>"$unpacked/$module.err"; then
    echo "api-check: $module: no breaking changes"
  else
    broken=1
    if grep -q 'API breakage' "$unpacked/$module.err"; then
      echo "api-check: $module: breaking changes:"
      grep -o 'API breakage: .*' "$unpacked/$module.err" | sed 's/ \[#api-digester-breaking-change\]$//; s/^/  /'
    else
      echo "api-check: $module could not be compared:"
      sed 's/^/  /' "$unpacked/$module.err" | head -20
    fi
  fi
done
exit "$broken"
