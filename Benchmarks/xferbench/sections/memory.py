"""2. Peak RSS of `xfer push` on a small and a large file (issue 7)."""

import os
from ..common import MiB, ROUNDS, SIZES, log, median, make_random_file, push_args, timed, completed_event, RESULTS


def bench_memory(work, recv):
    small, large = SIZES["mem_small"], SIZES["mem_large"]
    fs, fl = work.path("mem-small.bin"), work.path("mem-large.bin")
    make_random_file(fs, small)
    make_random_file(fl, large)
    peaks = {"small": [], "large": []}
    for rnd in range(ROUNDS):
        for label, f in (("small", fs), ("large", fl)):
            recv.clear()
            secs, peak, out = timed(push_args(f, "patch", recv.url, work.fresh("state")), work, "mem")
            completed_event(out)
            peaks[label].append(peak)
            log(f"  memory round {rnd + 1} {label}: peak RSS {peak / MiB:.1f} MiB ({secs:.1f} s)")
    recv.clear()
    os.unlink(fs)
    os.unlink(fl)
    ms, ml = median(peaks["small"]), median(peaks["large"])
    ratio = ml / ms
    ok = ms < 64 * MiB and ml < 64 * MiB and abs(ratio - 1) <= 0.10
    RESULTS["memory"] = {
        "title": f"2. Peak RSS of `xfer push` (patch, 8 MiB x 4), /usr/bin/time -v, {ROUNDS} alternating rounds",
        "header": ["file", "median peak RSS MiB", "runs MiB", "ratio large/small", "goal", "met"],
        "rows": [
            [f"{small // MiB} MiB random", f"{ms / MiB:.1f}", " ".join(f"{p / MiB:.1f}" for p in peaks["small"]), "-", "< 64 MiB", "yes" if ms < 64 * MiB else "NO"],
            [f"{large // MiB} MiB random", f"{ml / MiB:.1f}", " ".join(f"{p / MiB:.1f}" for p in peaks["large"]), f"{ratio:.2f}",
             "< 64 MiB, within 10%", "yes" if ok else "NO"],
        ],
    }
