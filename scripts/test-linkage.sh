#!/usr/bin/env bash
# An app that mounts the receiver's routes links neither LMDB nor libcurl: the receiver depends
# on XferPrimitives, XferWire and XferS3Core, never on the engine (Receiver/Package.swift). Builds the
# fixture app (Receiver/Tests/Fixtures/LinkageApp) in the command's build folder, where every
# module it needs is built already (only its own file is compiled, then linked), runs it, and
# reads what the binary needs (readelf's NEEDED) and which symbols it holds (nm).
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT="${SWIFT:-swift}"
scratch="${LINKAGE_SCRATCH:-CLI/.build}"
fixture=Receiver/Tests/Fixtures/LinkageApp

# The receiver's pins, so that the fixture resolves the versions already checked out and built
# (a fresh resolution could pick newer ones and rebuild everything). Not committed.
cp Receiver/Package.resolved "$fixture/Package.resolved"
start=$(date +%s)
"$SWIFT" build --package-path "$fixture" --scratch-path "$scratch" --product LinkageApp
bin="$("$SWIFT" build --package-path "$fixture" --scratch-path "$scratch" --show-bin-path)/LinkageApp"
echo "test-linkage: built $bin in $(( $(date +%s) - start ))s"

failed=0
needed="$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
echo "test-linkage: NEEDED: $(echo $needed)"
if echo "$needed" | grep -Eq '^lib(lmdb|curl)'; then
  echo "test-linkage: FAIL: the app needs $(echo "$needed" | grep -E '^lib(lmdb|curl)' | tr '\n' ' ')" >&2
  failed=1
fi
# The symbol table, read once (grep -q on a pipe would cut nm off and fail the pipe).
symbols="$(nm "$bin")"
# Undefined or defined, any reference to LMDB's or curl's API means the engine came along.
foreign="$(grep -E ' (mdb_|curl_)[a-z_]+$' <<<"$symbols" | head -5 || true)"
if [ -n "$foreign" ]; then
  echo "test-linkage: FAIL: the app holds LMDB or curl symbols:" >&2
  echo "$foreign" >&2
  failed=1
fi
# And the engine's own code: its module's symbols are mangled with `4Xfer` (XferS3Core's with
# `10XferS3Core`, XferPrimitives' with `14XferPrimitives`, which it may hold).
engine="$(grep -E '\$s4Xfer[0-9A-Z]' <<<"$symbols" | head -3 || true)"
if [ -n "$engine" ]; then
  echo "test-linkage: FAIL: the app holds the engine's (module Xfer) code:" >&2
  echo "$engine" >&2
  failed=1
fi
# A control, so that the checks above can fail: the receiver's own code and XferS3Core are there.
grep -q '12XferReceiver' <<<"$symbols" || { echo "test-linkage: FAIL: no XferReceiver symbols: nothing was checked" >&2; failed=1; }
grep -q '10XferS3Core' <<<"$symbols" || { echo "test-linkage: FAIL: no XferS3Core symbols: nothing was checked" >&2; failed=1; }
echo "test-linkage: $(grep -c '12XferReceiver' <<<"$symbols") XferReceiver and $(grep -c '10XferS3Core' <<<"$symbols") XferS3Core symbols, none of LMDB, curl or the engine"

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
"$bin" "$root" | grep -qx mounted || { echo "test-linkage: FAIL: the app did not mount the routes" >&2; failed=1; }
"$bin" s3://linkage-bucket | grep -q '^described s3://linkage-bucket' || { echo "test-linkage: FAIL: the app did not describe the store" >&2; failed=1; }

[ "$failed" = 0 ] && echo "test-linkage: the app links neither liblmdb nor libcurl, and runs"

# The `xfer` command uses nothing that only full Foundation defines (issue 44): linked statically
# for a release, one such symbol brings Foundation, CoreFoundation and ICU's data (most of the
# binary). Checked on the debug build, which links the toolchain's shared libraries: what it
# leaves undefined and one of Foundation's, FoundationXML's, FoundationNetworking's,
# FoundationInternationalization's or ICU's libraries defines is such a use.
xfer="CLI/.build/debug/xfer"
[ -x "$xfer" ] || "$SWIFT" build --package-path CLI --product xfer
toolchain_libs="$(dirname "$(dirname "$(readlink -f "$(command -v "$SWIFT")")")")/lib/swift/linux"
defined_by() { for lib in "$@"; do nm -D --defined-only "$toolchain_libs/$lib" | awk '{print $3}'; done | sort -u; }
full_foundation="$(defined_by libFoundation.so libFoundationXML.so libFoundationNetworking.so libFoundationInternationalization.so lib_FoundationICU.so)"
uses() { comm -12 <(nm -u "$1" | awk '{print $2}' | sort -u) <(echo "$2"); }
from_full="$(uses "$xfer" "$full_foundation")"
if [ -n "$from_full" ]; then
  echo "test-linkage: FAIL: xfer uses full Foundation (import FoundationEssentials, or a helper of XferPrimitives, instead):" >&2
  echo "$from_full" | head -10 | swift demangle --simplified >&2
  failed=1
fi
# Controls, so that the check can fail: xfer does use FoundationEssentials, and the tests'
# bundle, which imports Foundation, is caught.
[ -n "$(uses "$xfer" "$(defined_by libFoundationEssentials.so)")" ] || { echo "test-linkage: FAIL: xfer uses no FoundationEssentials symbol: nothing was checked" >&2; failed=1; }
bundle="$(ls CLI/.build/debug/*.xctest 2>/dev/null | head -1 || true)"
if [ -n "$bundle" ] && [ -z "$(uses "$bundle" "$full_foundation")" ]; then
  echo "test-linkage: FAIL: the check finds no full Foundation use even in $bundle" >&2; failed=1
fi
[ "$failed" = 0 ] && echo "test-linkage: xfer uses FoundationEssentials only (no Foundation, FoundationXML or ICU)"
exit "$failed"
