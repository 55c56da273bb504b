#!/usr/bin/env bash
# Strips a binary and keeps its symbols in a separate file, as Debian's -dbgsym packages do:
#   split-debug.sh BINARY DEBUG_ROOT   writes DEBUG_ROOT/xx/yyyy….debug (the binary's GNU build
#                                      id, split after two hex digits), strips BINARY in place
#                                      (--strip-unneeded) and links it to that file
#                                      (.gnu_debuglink); prints the debug file's path
#   split-debug.sh --id BINARY         prints xx/yyyy… only (what `make uninstall` removes)
# gdb finds the symbols by build id under a debug-file-directory: DEBUG_ROOT is PREFIX/lib/debug/.build-id.
set -euo pipefail
build_id() {
  local id
  id="$(readelf -n "$1" | sed -n 's/.*Build ID: \([0-9a-f]*\).*/\1/p' | head -1)"
  [ -n "$id" ] || { echo "split-debug: $1 has no GNU build id" >&2; exit 1; }
  echo "${id:0:2}/${id:2}"
}
if [ "${1:-}" = --id ]; then build_id "$2"; exit 0; fi
[ $# -eq 2 ] || { echo "usage: split-debug.sh BINARY DEBUG_ROOT | --id BINARY" >&2; exit 2; }
binary="$1" root="$2"
id="$(build_id "$binary")"
debug="$root/$id.debug"
install -d "$(dirname "$debug")"
objcopy --only-keep-debug "$binary" "$debug"
chmod 644 "$debug"
strip --strip-unneeded "$binary"
objcopy --add-gnu-debuglink="$debug" "$binary"
echo "$debug"
