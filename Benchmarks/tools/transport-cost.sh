#!/bin/bash
# The client's cost per request, two builds of xfer side by side, alternating:
# readiness waits (poll, ppoll, epoll_wait, counted by `strace -f -c`), CPU
# (`perf stat` task-clock) and context switches, for
#   - 2,000 files of 4 KiB pushed with patch and with ietf (per file), and
#   - 256 MiB pushed with patch in 64 KiB chunks (per chunk),
# into one `xfer serve` (of the first build) on 127.0.0.1. Each run's exit
# status is checked; a failed run stops the script.
#
#   Benchmarks/tools/transport-cost.sh OLD_XFER NEW_XFER [ROUNDS] [WORKDIR]
set -euo pipefail
tools=$(cd "$(dirname "$0")" && pwd)
old=$1 new=$2 rounds=${3:-3} work=${4:-$(mktemp -d -t xfer-transport-cost.XXXXXX)}
mkdir -p "$work" && cd "$work"
[ -d tree ] || python3 "$tools/cost-files.py" big/file 256
rm -rf recv && mkdir recv
"$old" serve --root recv --port 0 >serve.out 2>/dev/null &
serve=$!
trap 'kill $serve' EXIT
for _ in $(seq 100); do grep -q listening serve.out && break; sleep 0.1; done
url=$(grep -o 'http://[^ ]*' serve.out | head -1)
target() { if [ "$1" = ietf ]; then echo "$url/resumable/"; else echo "$url"; fi; }
waits() { awk '$NF ~ /^(poll|ppoll|epoll_wait|epoll_pwait)$/ {s += $4} END {print s + 0}' "$1"; }
run() {  # run NAME UNIT BINARY COUNT ARGS...: one push under strace, one under perf stat
  local name=${1// /-} unit=$2 binary=$3 count=$4; shift 4
  rm -rf st; strace -f -c -o "strace.$name" "$binary" "$@" --state st --progress none >/dev/null 2>err.txt || { cat err.txt; exit 1; }
  rm -rf st; perf stat -x, -e task-clock,context-switches -o "perf.$name" "$binary" "$@" --state st --progress none >/dev/null 2>err.txt \
    || { cat err.txt; exit 1; }
  printf '%-28s waits per %s %6.2f   CPU per %s %7.1f us   context switches %s\n' "$name" "$unit" \
    "$(echo "scale=2; $(waits "strace.$name") / $count" | bc)" \
    "$unit" "$(echo "scale=1; $(grep task-clock "perf.$name" | cut -d, -f1) * 1000 / $count" | bc)" \
    "$(grep context-switches "perf.$name" | cut -d, -f1)"
}
for round in $(seq "$rounds"); do
  for build in old new; do
    binary=$old; [ $build = new ] && binary=$new
    for backend in patch ietf; do
      run "$round $build $backend 4KiB" file "$binary" 2000 push tree --backend "$backend" --to "$(target "$backend")"
    done
    run "$round $build patch 64KiB" chunk "$binary" 4096 push big/file --backend patch --to "$url" --chunk-size 64KiB
  done
done
