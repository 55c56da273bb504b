"""3. Small chunks: 64 KiB chunks, `xfer push` against xfer-store-bench, and the stores' commit rate (issue 7)."""

import json
import os
import shutil
import subprocess
from ..common import (QUICK, MiB, ROUNDS, SIZES, log, median, STORE_BENCH, make_random_file, push_args,
                      completed_event, RESULTS, timed_cpu)


def bench_small_chunks(work, recv):
    size = SIZES["small"]
    f = work.path("small.bin")
    make_random_file(f, size)
    chunks = size // (64 << 10)
    kinds = ["xfer push", "curl -Z 8", "store-bench lmdb", "store-bench sqlite"]
    rates = {k: [] for k in kinds}
    cpu_per_chunk = []
    # Issue 46's bar: curl sending the same 64 KiB pieces, 8 at once, each a PUT /raw (cut once,
    # outside the timing); its CPU a request against xfer's a chunk.
    pieces = work.path("small-pieces")
    os.makedirs(pieces, exist_ok=True)
    with open(f, "rb") as source:
        for i in range(chunks):
            with open(os.path.join(pieces, f"p{i:06}"), "wb") as out:
                out.write(source.read(64 << 10))
    curl_config = work.path("small-curl.cfg")
    with open(curl_config, "w") as h:
        for i in range(chunks):
            h.write(f'upload-file = "{os.path.join(pieces, f"p{i:06}")}"\nurl = "{recv.url}/raw/small-p{i:06}"\n'
                    'output = "/dev/null"\n')
    curl_cpu_per_request = []
    for rnd in range(ROUNDS):
        for k in kinds:
            recv.clear()
            state = work.fresh("state")
            if k == "xfer push":
                secs, cpu, _, _, out = timed_cpu(push_args(f, "patch", recv.url, state, chunk="64KiB", concurrency=8),
                                                 work, "small", recv)
                completed_event(out)
                rate = chunks / secs
                cpu_per_chunk.append(cpu * 1e6 / chunks)
            elif k == "curl -Z 8":
                secs, cpu, _, _, _ = timed_cpu(["curl", "-sS", "-f", "--parallel", "--parallel-max", "8", "-K", curl_config],
                                               work, "small-curl", recv)
                # A baseline that fails fast looks fast: every piece must be stored, whole.
                stored = [n for n in os.listdir(os.path.join(recv.root, "raw")) if n.startswith("small-p")]
                if len(stored) != chunks or sum(os.path.getsize(os.path.join(recv.root, "raw", n)) for n in stored) != size:
                    raise RuntimeError(f"curl stored {len(stored)} pieces of {chunks}")
                rate = chunks / secs
                curl_cpu_per_request.append(cpu * 1e6 / chunks)
            else:
                out = subprocess.run([STORE_BENCH, "push", "--file", f, "--url", recv.url, "--store", k.split()[-1],
                                      "--chunk-size", str(64 << 10), "--concurrency", "8", "--state", state],
                                     capture_output=True, text=True, check=True).stdout
                rate = json.loads(out.strip().splitlines()[-1])["chunks_per_s"]
            rates[k].append(rate)
            log(f"  small chunks round {rnd + 1} {k}: {rate:.0f} chunks/s")
    recv.clear()
    os.unlink(f)
    shutil.rmtree(pieces, ignore_errors=True)
    base = median(rates["store-bench lmdb"])
    curl_cpu = median(curl_cpu_per_request)
    rows = []
    for k in kinds:
        m = median(rates[k])
        goal = k == "xfer push"
        cpu = median(cpu_per_chunk) if goal else curl_cpu if k == "curl -Z 8" else None
        rows.append([k, f"{m:.0f}", " ".join(f"{r:.0f}" for r in rates[k]), f"{m / base:.2f}",
                     f"{cpu:.0f}" if cpu is not None else "-",
                     f"{cpu / curl_cpu:.2f}" if cpu is not None else "-",
                     ">= 3000 chunks/s, <= 150 µs; <= 1.2x curl's µs (issue 46)" if goal else "-",
                     ("yes" if m >= 3000 and cpu <= 150 and cpu <= 1.2 * curl_cpu else "NO") if goal else "-"])
    RESULTS["small"] = {
        "title": (f"3. Small chunks: {size // MiB} MiB in 64 KiB chunks ({chunks} requests), patch, concurrency 8, "
                  f"{ROUNDS} alternating rounds; `xfer push` rate is chunks / the process's wall time, its CPU from /usr/bin/time"),
        "header": ["sender", "median chunks/s", "runs", "ratio to store-bench lmdb", "client CPU µs/chunk",
                   "CPU ratio to curl's a request", "goal", "met"],
        "rows": rows,
    }
    # The stores' raw commit rate (the bench alternates the stores itself).
    cr_chunks, cr_rounds = (1024, 3) if QUICK else (4096, 5)
    out = subprocess.run([STORE_BENCH, "commit-rate", "--chunks", str(cr_chunks), "--rounds", str(cr_rounds),
                          "--committers", "8,1", "--dir", work.fresh("commit-rate")],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows.append([str(r["committers"]), f"{r['lmdb_commits_per_s']:.0f}", f"{r['sqlite_commits_per_s']:.0f}",
                         f"{r['ratio']:.2f}", f"{r['lmdb_cpu_us_per_commit']:.1f}", f"{r['sqlite_cpu_us_per_commit']:.1f}"])
    RESULTS["commit"] = {
        "title": f"3b. `xfer-store-bench commit-rate`: {cr_chunks} one-chunk commits, {cr_rounds} alternating rounds (medians)",
        "header": ["committers", "LMDB commits/s", "SQLite commits/s", "LMDB/SQLite", "LMDB µs CPU/commit", "SQLite µs CPU/commit"],
        "rows": rows,
    }
