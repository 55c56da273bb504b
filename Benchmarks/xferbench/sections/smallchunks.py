"""3. Small chunks: 64 KiB chunks, `xfer push` against xfer-store-bench, and the stores' commit rate (issue 7)."""

import json
import os
import subprocess
from ..common import (QUICK, MiB, ROUNDS, SIZES, log, median, STORE_BENCH, make_random_file, push_args,
                      completed_event, RESULTS, timed_cpu)


def bench_small_chunks(work, recv):
    size = SIZES["small"]
    f = work.path("small.bin")
    make_random_file(f, size)
    chunks = size // (64 << 10)
    kinds = ["xfer push", "store-bench lmdb", "store-bench sqlite"]
    rates = {k: [] for k in kinds}
    cpu_per_chunk = []
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
            else:
                out = subprocess.run([STORE_BENCH, "push", "--file", f, "--url", recv.url, "--store", k.split()[-1],
                                      "--chunk-size", str(64 << 10), "--concurrency", "8", "--state", state],
                                     capture_output=True, text=True, check=True).stdout
                rate = json.loads(out.strip().splitlines()[-1])["chunks_per_s"]
            rates[k].append(rate)
            log(f"  small chunks round {rnd + 1} {k}: {rate:.0f} chunks/s")
    recv.clear()
    os.unlink(f)
    base = median(rates["store-bench lmdb"])
    rows = []
    for k in kinds:
        m = median(rates[k])
        goal = k == "xfer push"
        cpu = median(cpu_per_chunk) if goal else None
        rows.append([k, f"{m:.0f}", " ".join(f"{r:.0f}" for r in rates[k]), f"{m / base:.2f}",
                     f"{cpu:.0f}" if goal else "-",
                     ">= 3000 chunks/s, <= 150 µs" if goal else "-",
                     ("yes" if m >= 3000 and cpu <= 150 else "NO") if goal else "-"])
    RESULTS["small"] = {
        "title": (f"3. Small chunks: {size // MiB} MiB in 64 KiB chunks ({chunks} requests), patch, concurrency 8, "
                  f"{ROUNDS} alternating rounds; `xfer push` rate is chunks / the process's wall time, its CPU from /usr/bin/time"),
        "header": ["sender", "median chunks/s", "runs", "ratio to store-bench lmdb", "client CPU µs/chunk", "goal", "met"],
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
