"""4b. `xfer list` with 10,000 jobs in the store (issue 7)."""

import subprocess
import time
from ..common import (MiB, REPEATS, SIZES, log, median, XFER, STORE_BENCH, make_random_file, completed_event,
                      RESULTS)


def bench_list(work, recv):
    count = SIZES["list_jobs"]
    template = work.fresh("template-state")
    f = work.path("template.bin")
    make_random_file(f, 1 * MiB)
    out = subprocess.run([XFER, "push", f, "--backend", "patch", "--to", recv.url, "--state", template, "--json",
                          "--chunk-size", "64KiB", "--keep-finished", "7d"], capture_output=True, text=True, check=True)
    completed_event(out.stdout)
    state = work.fresh("list-state")
    seeded = subprocess.run([STORE_BENCH, "seed-jobs", "--state", state, "--template", template, "--count", str(count),
                             "--files", "3"], capture_output=True, text=True, check=True).stdout.strip()
    log("  seed-jobs:", seeded)
    rows = []
    for variant in (["list"], ["list", "--all"]):
        times = []
        lines = 0
        for _ in range(REPEATS):
            t0 = time.monotonic()
            out = subprocess.run([XFER, *variant, "--state", state], capture_output=True, text=True)
            times.append(time.monotonic() - t0)
            if out.returncode != 0:
                raise RuntimeError(f"xfer list failed: {out.stderr}")
            lines = len(out.stdout.splitlines())
        m = median(times)
        rows.append([f"xfer {' '.join(variant)} ({lines} lines)", f"{m * 1000:.0f}", " ".join(f"{t * 1000:.0f}" for t in times),
                     "<= 300 ms", "yes" if m <= 0.3 else "NO"])
        log(f"  {' '.join(variant)}: {m * 1000:.0f} ms")
    RESULTS["list"] = {
        "title": f"4b. `xfer list` with {count} jobs in the store (half completed, 3 files each; seeded by `xfer-store-bench seed-jobs`), {REPEATS} runs",
        "header": ["command", "median ms", "runs ms", "goal", "met"],
        "rows": rows,
    }
    recv.clear()
