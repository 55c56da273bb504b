"""5. Bytes sent again after a SIGKILL at half, against what was in flight (issue 7)."""

import os
import queue
import subprocess
import threading
from ..common import (MiB, SIZES, log, make_random_file, sha256_file, sha256_url, push_args, completed_event,
                      RESULTS, read_events)


def bench_resend(work, recv):
    size = SIZES["resend"]
    f = work.path("resend.bin")
    make_random_file(f, size)
    digest = sha256_file(f)
    rows = []
    for backend in ("patch", "multipart", "sequence"):
        recv.clear()
        state = work.fresh("state")
        concurrency = None if backend == "sequence" else 4
        args = push_args(f, backend, recv.url, state, concurrency=concurrency)
        total_chunks = -(-size // (8 * MiB))
        before = recv.stats()
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        events = queue.Queue()
        threading.Thread(target=read_events, args=(proc, events), daemon=True).start()
        acked = 0
        while acked < total_chunks // 2:
            _, ev = events.get(timeout=300)
            if ev.get("event") == "chunk":
                acked += 1
        proc.kill()
        proc.wait()
        out = subprocess.run(args, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"re-run failed: {out.stderr}")
        done = completed_event(out.stdout)
        after = recv.stats()
        resent = after - before - size
        url = done["files"][0]["url"]
        same = sha256_url(url) == digest
        bound = (1 if backend == "sequence" else 4) * 8 * MiB
        rows.append([backend, f"{acked}/{total_chunks}", f"{(after - before) / MiB:.1f}", f"{resent / MiB:.1f}",
                     f"{bound // MiB} MiB ({'1' if backend == 'sequence' else '4'} x 8 MiB)",
                     "yes" if 0 <= resent <= bound else "NO", "yes" if same else "NO"])
        log(f"  resend {backend}: re-sent {resent / MiB:.1f} MiB, identical {same}")
    recv.clear()
    os.unlink(f)
    RESULTS["resend"] = {
        "title": (f"5. Re-sent after SIGKILL: {size // MiB} MiB, 8 MiB chunks (x4 for patch and multipart), killed after "
                  "half the `chunk` events, re-run to the end; bytes from the receiver's GET /stats"),
        "header": ["backend", "acked at kill", "received MiB", "re-sent MiB", "bound", "within", "byte-identical (sha256)"],
        "rows": rows,
    }
