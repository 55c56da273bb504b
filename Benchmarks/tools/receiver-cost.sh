#!/bin/bash
# The receiver's cost per request, two builds of xfer side by side, alternating:
#   - 2,000 files of 4 KiB pushed with ietf, tus and patch (each build's own `xfer push` into its
#     own `xfer serve`), and the same files as 2,000 `curl --parallel-max 8` PUT /raw into the
#     first build's: the receiver's CPU per file (utime + stime from /proc) and, in a second
#     run under `strace -f -c`, its system calls per file;
#   - 1 GiB pushed with tus at its defaults (partial uploads, concatenated): wall time and the
#     receiver's CPU.
# Every run is checked: curl's answers must all be 201, xfer's files must all be published
# (counted under the root), the 1 GiB file byte-identical.
#
#   Benchmarks/tools/receiver-cost.sh OLD_XFER NEW_XFER [ROUNDS] [ROOT_PARENT] [WORKDIR]
#
# ROOT_PARENT: where the receivers' roots go (default: WORKDIR); a mount of another filesystem
# (XFS, Btrfs) shows what the concatenation's copy_file_range does there.
set -euo pipefail
tools=$(cd "$(dirname "$0")" && pwd)
old=$1 new=$2 rounds=${3:-3} work=${5:-$(mktemp -d -t xfer-receiver-cost.XXXXXX)}
parent=${4:-$work}
mkdir -p "$work" && cd "$work"
[ -d tree ] || python3 "$tools/cost-files.py" big 1024
serve="" runs=0 root=""
# A fresh root for every run, all deleted at the end: deleting thousands of files just before a
# run makes ext4 slower to create them again (its inode allocator skips the recently deleted),
# which would charge one run for the one before it.
trap 'rm -rf "$parent"/recv.*' EXIT
start() {  # start BINARY [strace]: a fresh root, `xfer serve` on it; sets url, pid, root
  runs=$((runs + 1)) root="$parent/recv.$runs"
  rm -rf st && mkdir -p "$root"
  sync
  if [ "${2:-}" = strace ]; then
    strace -f -c -o strace.out "$1" serve --root "$root" --port 0 >serve.out 2>/dev/null &
  else
    "$1" serve --root "$root" --port 0 >serve.out 2>/dev/null &
  fi
  serve=$!
  for _ in $(seq 100); do grep -q listening serve.out && break; sleep 0.1; done
  url=$(grep -o 'http://[^ ]*' serve.out | head -1)
  pid=$(pgrep -f "serve --root $root --port 0" | tail -1)
}
stop() { kill "$pid"; wait "$serve" 2>/dev/null || true; }
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
target() { case $1 in ietf) echo "$url/resumable/" ;; tus) echo "$url/files/" ;; *) echo "$url" ;; esac; }
send() {  # send BINARY BACKEND: 2,000 files, checked
  if [ "$2" = raw ]; then
    (cd tree && find . -type f | sed 's|^\./||' | while read -r f; do
      printf 'url = "%s/raw/%s"\nupload-file = "%s"\noutput = "/dev/null"\n' "$url" "${f//\//-}" "$f"; done) >curl.cfg
    codes=$(cd tree && curl -sS --no-progress-meter --parallel --parallel-max 8 -K ../curl.cfg -w '%{http_code}\n' | sort | uniq -c)
    [ "$(echo "$codes" | awk '$2 == 201 {print $1}')" = 2000 ] || { echo "curl: $codes"; exit 1; }
  else
    "$1" push tree --backend "$2" --to "$(target "$2")" --state st --progress none >/dev/null
    [ "$(find "$root/downloads" -type f | wc -l)" = 2000 ] || { echo "$2: not every file published"; exit 1; }
  fi
}
for round in $(seq "$rounds"); do
  for build in old new; do
    binary=$old; [ $build = new ] && binary=$new
    for backend in raw ietf tus patch; do
      [ $backend = raw ] && [ $build = new ] && continue
      start "$binary"; c0=$(cpu); send "$binary" $backend; c1=$(cpu); stop
      start "$binary" strace; send "$binary" $backend; stop
      calls=$(awk 'NR > 2 && $NF != "total" && $4 > 0 {s += $4} END {print s}' strace.out)
      top=$(awk 'NR > 2 && $NF != "total" && $4 > 0 {printf "%s %.1f\n", $NF, $4 / 2000}' strace.out | sort -k2 -n -r | head -6 | tr '\n' ' ')
      printf '%s %-4s %-6s receiver CPU per file %5.3f ms   system calls per file %5.1f (%s)\n' "$round" $build $backend \
        "$(echo "scale=4; ($c1 - $c0) * 10 / 2000" | bc)" "$(echo "scale=1; $calls / 2000" | bc)" "$top"
    done
    start "$binary"; c0=$(cpu); t0=$(date +%s.%N)
    "$binary" push big --backend tus --to "$url/files/" --state st --progress none >/dev/null
    t1=$(date +%s.%N); c1=$(cpu)
    cmp -s big "$root"/downloads/*/big || { echo "tus: the 1 GiB file differs"; exit 1; }
    stop
    rm -rf "$root"  # a few large files: no inodes to skip, and room for the next on a small mount
    printf '%s %-4s tus 1 GiB   %4.0f MiB/s   receiver CPU %5.2f s\n' "$round" $build \
      "$(echo "1024 / ($t1 - $t0)" | bc -l)" "$(echo "scale=2; ($c1 - $c0) / 100" | bc)"
  done
done
