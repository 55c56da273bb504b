#!/usr/bin/env bash
# Strips a binary and keeps its symbols in a separate file, as Debian's -dbgsym packages do:
#   split-debug.sh BINARY DEBUG_FILE   writes BINARY's symbols to DEBUG_FILE, strips BINARY in
#                                      place (--strip-unneeded, and .comment: compilers' names,
#                                      nothing the binary uses) and links it to DEBUG_FILE
#                                      (.gnu_debuglink: its name and checksum)
#   split-debug.sh --id BINARY         prints BINARY's GNU build id as xx/yyyy…, the path under a
#                                      debug-file-directory's .build-id/ where gdb looks for it
# `make install` writes PREFIX/lib/debug/.build-id/xx/yyyy….debug; `make deb` writes the symbols
# beside the package.
set -euo pipefail
build_id() {
  local id
  id="$(readelf -n "$1" | sed -n 's/.*Build ID: \([0-9a-f]*\).*/\1/p' | head -1)"
  [ -n "$id" ] || { echo "split-debug: $1 has no GNU build id" >&2; exit 1; }
  echo "${id:0:2}/${id:2}"
}
if [ "${1:-}" = --id ]; then build_id "$2"; exit 0; fi
[ $# -eq 2 ] || { echo "usage: split-debug.sh BINARY DEBUG_FILE | --id BINARY" >&2; exit 2; }
binary="$1" debug="$2"
install -d "$(dirname "$debug")"
objcopy --only-keep-debug "$binary" "$debug"
chmod 644 "$debug"
strip --strip-unneeded --remove-section=.comment "$binary"
objcopy --add-gnu-debuglink="$debug" "$binary"
