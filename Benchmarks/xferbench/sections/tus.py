"""tus 1.0 (issue 9): xfer against tuspy into the PyPI tus server."""

import os
import subprocess
import time
from ..common import MiB, ROUNDS, SIZES, log, median, XFER, make_random_file, parse_time_v, RESULTS
from ..servers import TUS_PYTHON, TUS_TOOL, TusServer
from ..system import sh


def bench_tus(work):
    """xfer vs tuspy (the official tus client) into the same tus server, same
    file, 8 MiB chunks; alternating, a fresh server directory per upload."""
    size = SIZES["tus"]
    f = work.path("tus.bin")
    make_random_file(f, size)
    # The server offers sha1 checksums, which xfer sends with every chunk; tuspy
    # sends them only when asked: "tuspy --checksum" is the like-for-like row.
    kinds = ["xfer", "xfer -c 1", "tuspy --checksum", "tuspy"]
    rates = {k: [] for k in kinds}
    rss = {k: [] for k in kinds}
    for rnd in range(ROUNDS):
        for k in kinds:
            server = TusServer(work.path(f"tus-server-{rnd}-{k.replace(' ', '')}"))
            if k.startswith("tuspy"):
                args = [TUS_PYTHON, TUS_TOOL, "upload", server.url, f, str(8 * MiB)] + (["--checksum"] if "checksum" in k else [])
            else:
                args = [XFER, "push", f, "--backend", "tus", "--to", server.url, "--state", work.fresh("state"),
                        "--chunk-size", "8MiB", "--concurrency", "1" if k == "xfer -c 1" else "4"]
            try:
                tv = work.path(f"time-tus-{rnd}-{k.replace(' ', '').replace('-', '')}.txt")
                start = time.monotonic()
                out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True)
                secs = time.monotonic() - start
                peak, _ = parse_time_v(tv)
                if out.returncode != 0:
                    raise RuntimeError(f"{k} exited {out.returncode}: {out.stderr.strip()[-300:]}")
                url = out.stdout.strip().splitlines()[-1]
                upload = os.path.join(server.root, "uploads")
                stored = max((os.path.join(upload, n) for n in os.listdir(upload)), key=os.path.getsize)
                if os.path.getsize(stored) != size:
                    raise RuntimeError(f"{k}: the server holds {os.path.getsize(stored)} bytes, not {size} ({url})")
            finally:
                server.stop()
            rates[k].append(size / MiB / secs)
            rss[k].append(peak)
            log(f"  tus round {rnd + 1} {k}: {size / MiB / secs:.0f} MiB/s ({secs:.2f} s, RSS {peak / MiB:.0f} MiB)")
    os.unlink(f)
    base = median(rates["tuspy --checksum"])
    tuspy = "tuspy " + sh(f"{TUS_PYTHON} -c 'import importlib.metadata as m;print(m.version(\"tuspy\"))'")
    versions = {"xfer": "this build: sha1 per chunk, 4 partial uploads in flight, concatenated",
                "xfer -c 1": "this build: sha1 per chunk, --concurrency 1, PATCH in order",
                "tuspy --checksum": f"{tuspy}: sha1 per chunk, PATCH in order",
                "tuspy": f"{tuspy}: no checksum, PATCH in order"}
    rows = []
    for k in kinds:
        m = median(rates[k])
        rows.append([k, versions[k], f"{m:.0f}", " ".join(f"{r:.0f}" for r in rates[k]), f"{m / base:.2f}",
                     f"{median(rss[k]) / MiB:.0f}", " ".join(f"{r / MiB:.0f}" for r in rss[k])])
    server_version = sh(f"{TUS_PYTHON} -c 'import importlib.metadata as m;print(m.version(\"resumable-upload\"))'")
    RESULTS["tus"] = {
        "title": (f"9. tus 1.0: {size // MiB} MiB into resumable-upload {server_version} on 127.0.0.1, 8 MiB chunks,"
                  f" {ROUNDS} alternating rounds, a fresh server directory per upload"),
        "header": ["client", "how", "median MiB/s", "runs MiB/s", "ratio to tuspy --checksum", "median peak RSS MiB",
                   "runs RSS MiB"],
        "rows": rows,
    }
