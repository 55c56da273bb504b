"""Downloads (issue 31) from `xfer serve`: xfer pull against curl and aria2c, and a kill at half."""

import json
import os
import shutil
import signal
import subprocess
import time
from ..common import (MiB, GiB, ROUNDS, SIZES, log, median, XFER, make_random_file, sha256_file, parse_time_v,
                      push_args, RESULTS, parse_cpu_v)
from ..system import sh


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run_download(args, target, work, label, env=None):
    """(wall s until the file is on disk, client CPU s, peak RSS bytes): the run, then an fsync of
    the result, since xfer's own durability (fdatasync per range) is part of its cost."""
    tv = work.path(f"time-{label}.txt")
    start = time.monotonic()
    out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{label} exited {out.returncode}: {out.stderr.strip()[-300:]}")
    fsync_path(target)
    elapsed = time.monotonic() - start
    peak, _ = parse_time_v(tv)
    return elapsed, parse_cpu_v(tv), peak


def bench_pull(work, recv):
    """1 GiB from `xfer serve`'s /downloads/: xfer pull at its defaults and at 16 x 8 MiB, beside curl -o
    (one stream) and aria2c -x 16 -s 16, alternating rounds, each result's SHA-256 checked; then
    kill -9 at half and the same pull again, ranges re-fetched counted."""
    if shutil.which("aria2c") is None:
        raise RuntimeError("aria2c is missing (make bench installs Debian's aria2)")
    size = SIZES["pull"]
    source = work.path("pull-source.bin")
    make_random_file(source, size)
    expected = sha256_file(source)
    pushed = subprocess.run(push_args(source, "patch", recv.url, work.fresh("state-pull-push"), concurrency=4),
                            capture_output=True, text=True)
    if pushed.returncode != 0:
        raise RuntimeError(f"the push of the file to pull failed: {pushed.stderr.strip()[-300:]}")
    url = next((json.loads(l)["url"] for l in pushed.stdout.splitlines() if '"event":"fileCompleted"' in l), None)
    if not url:
        raise RuntimeError("the push gave no URL")
    os.unlink(source)

    def command(kind, target):
        if kind == "curl":
            return ["curl", "-fsS", "-o", target, url]
        if kind == "aria2c":
            return ["aria2c", "-x", "16", "-s", "16", "--file-allocation=none", "--allow-overwrite=true",
                    "--auto-file-renaming=false", "--quiet=true", "-d", os.path.dirname(target), "-o", os.path.basename(target), url]
        args = [XFER, "pull", url, target, "--state", work.fresh("state-pull"), "--quiet"]
        return args + (["--concurrency", "16", "--chunk-size", "8MiB"] if kind == "xfer 16x8MiB" else [])

    kinds = ["xfer defaults", "xfer 16x8MiB", "curl", "aria2c"]
    how = {"xfer defaults": "this build, no flag (8 ranges of 8 MiB in flight)",
           "xfer 16x8MiB": "this build, --concurrency 16 --chunk-size 8MiB",
           "curl": sh("curl --version | head -1").split(" (")[0] + ", -o FILE (one stream)",
           "aria2c": "aria2 " + sh("aria2c --version | head -1").split()[-1] + ", -x 16 -s 16"}
    results = {k: [] for k in kinds}
    for rnd in range(ROUNDS):
        for k in kinds:
            directory = work.fresh("pull-into")
            target = os.path.join(directory, "copy.bin")
            measured = run_download(command(k, target), target, work, f"pull-{k.replace(' ', '-')}-{rnd}")
            if os.path.getsize(target) != size or sha256_file(target) != expected:
                raise RuntimeError(f"{k}: the file it wrote is not the one served")
            shutil.rmtree(directory)
            results[k].append(measured)
            log(f"  pull round {rnd + 1} {k}: {size / MiB / measured[0]:.0f} MiB/s ({measured[0]:.2f} s, "
                f"CPU {measured[1]:.2f} s, RSS {measured[2] / MiB:.0f} MiB)")
    base = {k: median([size / MiB / m[0] for m in results[k]]) for k in kinds}
    rows = []
    for k in kinds:
        rates = [size / MiB / m[0] for m in results[k]]
        cpu = median([m[1] for m in results[k]])
        rows.append([k, how[k], f"{median(rates):.0f}", " ".join(f"{r:.0f}" for r in rates),
                     f"{base[k] / base['curl']:.2f}", f"{base[k] / base['aria2c']:.2f}",
                     f"{cpu:.2f}", f"{cpu / (size / GiB):.2f}", f"{median([m[2] for m in results[k]]) / MiB:.0f}"])
    RESULTS["pull"] = {
        "title": (f"12. Downloads: {size // MiB} MiB from xfer serve's /downloads/ on 127.0.0.1, each timed until its file "
                  f"is on disk (its run, then an fsync of the result) and its SHA-256 checked, {ROUNDS} alternating rounds"),
        "header": ["client", "how", "median MiB/s", "runs MiB/s", "÷ curl", "÷ aria2c", "client CPU s", "CPU s per GiB",
                   "peak RSS MiB"],
        "rows": rows,
    }

    # kill -9 at half, then the same pull: what is fetched again is at most what was in flight.
    directory = work.fresh("pull-kill")
    target = os.path.join(directory, "copy.bin")
    state = work.fresh("state-pull-kill")
    chunks = (size + 8 * MiB - 1) // (8 * MiB)
    args = [XFER, "pull", url, target, "--state", state, "--chunk-size", "8MiB", "--json"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    acknowledged = 0
    for line in proc.stdout:
        if '"event":"chunk"' in line:
            acknowledged += 1
            if acknowledged >= chunks // 2:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait()
    resumed = subprocess.run(args, capture_output=True, text=True)
    if resumed.returncode != 0:
        raise RuntimeError(f"the resumed pull failed: {resumed.stderr.strip()[-300:]}")
    fetched = sum(1 for line in resumed.stdout.splitlines() if '"event":"chunk"' in line)
    started = next(json.loads(l) for l in resumed.stdout.splitlines() if '"event":"started"' in l)
    # Ranges committed after the last event read before the kill count as done at the restart.
    done_at_restart = started.get("doneBytes", 0) // (8 * MiB)
    refetched = fetched - (chunks - done_at_restart)
    if sha256_file(target) != expected:
        raise RuntimeError("the resumed pull's file is not the one served")
    RESULTS["pull_kill"] = {
        "title": f"kill -9 at half of the {size // MiB} MiB pull (8 MiB ranges, its default 8 in flight), then the same command again",
        "header": ["ranges", "reported done before the kill", "done in the state at restart", "fetched by the resume",
                   "fetched again", "bound (in flight × range)", "file byte-identical"],
        "rows": [[chunks, acknowledged, done_at_restart, fetched,
                  f"{refetched} ranges = {refetched * 8} MiB", "8 × 8 MiB = 64 MiB", "yes"]],
    }
