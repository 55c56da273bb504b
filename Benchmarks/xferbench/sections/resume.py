"""4a. Resume of a half-done million-chunk job: spawn to the first chunk request (issue 7)."""

import os
import queue
import re
import shutil
import subprocess
import threading
import time
from ..common import GiB, env_int, SIZES, log, median, STORE_BENCH, push_args, RESULTS, read_events
from ..servers import Receiver


def bench_resume(work):
    chunk = 64 << 10
    size = SIZES["resume_sparse"]
    chunks = size // chunk
    half = chunks // 2
    concurrency = 8
    f = work.path("sparse.bin")
    with open(f, "wb") as h:
        h.truncate(size)
    root = work.path("resume-root")
    state = work.fresh("resume-state")
    recv = Receiver(root)
    url, port = recv.url, recv.port
    args = push_args(f, "patch", url, state, chunk="64KiB", concurrency=concurrency)
    # 1. A real push creates the job and the upload; killed once the first chunk is acknowledged.
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    events = queue.Queue()
    threading.Thread(target=read_events, args=(proc, events), daemon=True).start()
    job = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        _, ev = events.get(timeout=120)
        if ev.get("event") == "started":
            job = ev["job"]
        if ev.get("event") == "chunk":
            break
    proc.kill()
    proc.wait()
    recv.stop()
    # An upload is `<id>.log` and `<id>.data` (the receiver's flat layout) or a directory `<id>/`.
    entries = os.listdir(os.path.join(root, "uploads"))
    uploads = sorted({name.split(".")[0] for name in entries})
    if len(uploads) != 1 or not job:
        raise RuntimeError(f"expected one upload and a job, got {entries} {job}")
    upload = uploads[0]
    flat = os.path.join(root, "uploads", upload + ".log")
    log_path = flat if os.path.exists(flat) else os.path.join(root, "uploads", upload, "received.log")
    # 2. Half the chunks acknowledged on both sides.
    seeded = subprocess.run([STORE_BENCH, "seed-resume", "--state", state, "--job", job, "--chunks", str(half)],
                            capture_output=True, text=True, check=True).stdout.strip()
    log("  seed-resume:", seeded)
    with open(log_path, "a") as h:
        h.write("".join(f"\n+{n};" for n in range(1, half + 1)))
        h.flush()
        os.fsync(h.fileno())
    # 3. Spawn the same push; stop the clock when the first chunk request reaches the receiver.
    stalls = []
    for n in range(half + 1, half + 1 + concurrency):
        # The upload's handle is its id and a signature (`*`: any characters within the segment).
        stalls += ["--stall", f"/uploads/{upload}*/chunks/{n}@1"]
    times, phases = [], []
    # Each run costs about as long as hashing the acknowledged half takes (see Docs/benchmarks.md).
    for rep in range(env_int("RESUME_REPEATS", 3)):  # 5 would push `make bench` past ~15 min
        recv = Receiver(root, port=port, extra=stalls)
        t0 = time.monotonic()
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        events = queue.Queue()
        threading.Thread(target=read_events, args=(proc, events), daemon=True).start()
        hit = recv.wait_line("stalled", 300)
        proc.kill()
        proc.wait()
        recv.stop()
        seen = {}
        while not events.empty():
            at, ev = events.get()
            seen.setdefault(ev.get("event"), at - t0)
        if not hit:
            raise RuntimeError("no chunk request reached the receiver within 300 s")
        at, line = hit
        m = re.search(r"/chunks/(\d+)", line)
        first_chunk = int(m.group(1)) if m else None
        times.append(at - t0)
        phases.append(seen)
        log(f"  resume run {rep + 1}: {(at - t0) * 1000:.0f} ms to first chunk request ({line}); events {seen}")
    m = median(times)
    started = median([p.get("started", float("nan")) for p in phases])
    reconciled = median([p.get("reconciled", float("nan")) for p in phases if "reconciled" in p]) if any("reconciled" in p for p in phases) else None
    RESULTS["resume"] = {
        "title": (f"4a. Resume: {chunks} chunks of 64 KiB ({size // GiB} GiB sparse file), {half} acknowledged; "
                  f"spawn of the same `xfer push` to the first chunk request at the receiver (--stall), {len(times)} runs"),
        "header": ["measure", "median ms", "runs ms", "goal", "met"],
        "rows": [
            ["spawn -> first chunk request", f"{m * 1000:.0f}", " ".join(f"{t * 1000:.0f}" for t in times), "<= 300 ms",
             "yes" if m <= 0.3 else "NO"],
            ["spawn -> `started` event on stdout", f"{started * 1000:.0f}", "-", "-", "-"],
        ] + ([["spawn -> `reconciled` event on stdout", f"{reconciled * 1000:.0f}", "-", "-", "-"]] if reconciled else [])
          + [["first chunk requested", str(first_chunk), f"expected {half + 1}", "-", "-"]],
    }
    shutil.rmtree(root, ignore_errors=True)
    os.unlink(f)
    RESULTS["_resume_args"] = (args, stalls, upload, port, root)
