"""1. Throughput: `xfer push` (patch, multipart, sequence) against one `curl -T` stream (issue 7)."""

import os
from ..common import MiB, ROUNDS, SIZES, log, median, make_random_file, push_args, timed, completed_event, RESULTS


def bench_throughput(work, recv):
    size = SIZES["throughput"]
    f = work.path("throughput.bin")
    make_random_file(f, size)
    kinds = ["curl", "patch", "multipart", "sequence"]
    rates = {k: [] for k in kinds}
    rss = {k: [] for k in kinds}
    for rnd in range(ROUNDS):
        for k in kinds:
            recv.clear()
            if k == "curl":
                args = ["curl", "-sS", "-o", "/dev/null", "-f", "-T", f, f"{recv.url}/raw/tp-{rnd}.bin"]
            elif k == "sequence":
                args = push_args(f, k, recv.url, work.fresh("state"), concurrency=None)
            else:
                args = push_args(f, k, recv.url, work.fresh("state"))
            secs, peak, out = timed(args, work, k)
            if k != "curl":
                completed_event(out)
            rates[k].append(size / MiB / secs)
            rss[k].append(peak)
            log(f"  throughput round {rnd + 1} {k}: {size / MiB / secs:.0f} MiB/s ({secs:.2f} s, RSS {peak / MiB:.0f} MiB)")
    recv.clear()
    os.unlink(f)
    curl = median(rates["curl"])
    goals = {"patch": 0.9, "multipart": 0.9, "sequence": 0.8}
    rows = []
    for k in kinds:
        m = median(rates[k])
        ratio = m / curl
        goal = goals.get(k)
        rows.append([k, "8 MiB x 4" if k in ("patch", "multipart") else ("8 MiB" if k == "sequence" else "one stream"),
                     f"{m:.0f}", " ".join(f"{r:.0f}" for r in rates[k]), f"{ratio:.2f}",
                     f">= {goal}" if goal else "-", ("yes" if ratio >= goal else "NO") if goal else "-",
                     f"{median(rss[k]) / MiB:.0f}"])
    RESULTS["throughput"] = {
        "title": f"1. Throughput: {size // MiB} MiB of random bytes, {ROUNDS} alternating rounds (curl, patch, multipart, sequence)",
        "header": ["sender", "chunks", "median MiB/s", "runs MiB/s", "ratio to curl", "goal", "met", "peak RSS MiB"],
        "rows": rows,
    }
