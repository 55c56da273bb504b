#!/usr/bin/env python3
"""Two builds of xfer side by side on one large file, alternating rounds (the receiver of each
build, the client of the new one: what a change of the receiver alone does):

    Benchmarks/tools/large-file-ab.py OLD_XFER NEW_XFER [ROUNDS] [BACKENDS] [WORKDIR]

BACKENDS: comma-separated, of ietf, tus, patch, sequence, multipart, each at its defaults or with
`:SIZE` a chunk size (`sequence:8MiB`) (default ietf,tus); every round
also runs `curl -T` to PUT /raw on the new build's receiver, the bar. Each run gets a fresh root
(deleted after it) and a `sync` before it, so no run pays for the writeback of the one before.
Every run is checked: xfer's exit code, curl's status (201), and the stored file of the file's
size under the root; a run that fails stops the script. Prints MiB/s and the receiver's CPU-s
(utime + stime from /proc) per run, then medians and the ratio to curl's median.

On this VM the page cache's first touch of memory the host took back costs several times a
warm copy (`perf`: the receiver's samples in `copy_folio_from_iter_atomic`), so a run's rate
depends on what ran before it: use 5 rounds or more and read the medians.
"""
import os, re, shutil, statistics, subprocess, sys, time

old, new = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
backends = (sys.argv[4] if len(sys.argv) > 4 else "ietf,tus").split(",")
work = sys.argv[5] if len(sys.argv) > 5 else "/work/xfer-large-file-ab"
size = 1 << 30
paths = {"tus": "/files/", "ietf": "/resumable/"}
os.makedirs(work, exist_ok=True)
source = os.path.join(work, "one.bin")
if not os.path.exists(source) or os.path.getsize(source) != size:
    with open(source, "wb") as out:
        subprocess.run(["head", "-c", str(size), "/dev/urandom"], stdout=out, check=True)


def serve(binary, root):
    proc = subprocess.Popen([binary, "serve", "--root", root, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    match = re.search(r"http://127\.0\.0\.1:\d+", proc.stdout.readline())
    if not match:
        proc.kill()
        sys.exit(f"{binary} serve did not start")
    return proc, match.group(0)


def cpu(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


kinds = ["curl"] + [f"{b} {build}" for b in backends for build in ("old", "new")]
results = {kind: [] for kind in kinds}
for number in range(rounds):
    for kind in (kinds if number % 2 == 0 else kinds[::-1]):
        root, state = os.path.join(work, "root"), os.path.join(work, "state")
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
        os.sync()
        proc, url = serve(old if kind.endswith(" old") else new, root)
        if kind == "curl":
            args = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", source, url + "/raw/one.bin"]
        else:
            backend, _, chunk = kind.split()[0].partition(":")
            args = [new, "push", source, "--backend", backend, "--to", url + paths.get(backend, ""), "--state", state,
                    "--progress", "none"] + (["--chunk-size", chunk] if chunk else [])
        before = cpu(proc.pid)
        start = time.monotonic()
        run = subprocess.run(args, capture_output=True, text=True)
        elapsed = time.monotonic() - start
        receiver = cpu(proc.pid) - before
        proc.terminate()
        proc.wait()
        if run.returncode != 0 or (kind == "curl" and run.stdout.strip() != "201"):
            sys.exit(f"{kind}: exit {run.returncode}, {run.stdout.strip()[-80:]} {run.stderr.strip()[-300:]}")
        stored = [n for d, _, names in os.walk(root) for n in names
                  if "downloads" in d or "raw" in d if os.path.getsize(os.path.join(d, n)) == size]
        if len(stored) != 1:
            sys.exit(f"{kind}: {len(stored)} stored files of {size} bytes under {root}, expected 1")
        results[kind].append((size / (1 << 20) / elapsed, receiver))
        print(f"round {number + 1} {kind}: {results[kind][-1][0]:.0f} MiB/s, receiver {receiver:.2f} CPU-s", flush=True)
        shutil.rmtree(root, ignore_errors=True)
curl = statistics.median(rate for rate, _ in results["curl"])
for kind in kinds:
    rates = [rate for rate, _ in results[kind]]
    print(f"{kind:15} median {statistics.median(rates):5.0f} MiB/s (runs {' '.join(f'{r:.0f}' for r in rates)}), "
          f"{statistics.median(rates) / curl:.2f}x curl, receiver median "
          f"{statistics.median(c for _, c in results[kind]):.2f} CPU-s")
