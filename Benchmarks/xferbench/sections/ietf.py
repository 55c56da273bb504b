"""The IETF's resumable uploads (issue 20): into xfer serve and Apple's server, beside tus, patch and curl."""

import os
import shutil
from ..common import MiB, ROUNDS, SIZES, log, median, make_random_file, push_args, RESULTS, timed_cpu
from ..servers import Receiver, AppleServer


def bench_ietf(work):
    """The IETF draft's uploads (--backend ietf) into xfer serve and into Apple's server, beside tus
    and patch into xfer serve and curl's one stream (the bar), the same file, alternating, a fresh
    server per run. The draft allows one append at a time per upload: ietf is one stream of 8 MiB
    PATCHes, where tus and patch send 4 chunks at once."""
    size = SIZES["ietf"]
    f = work.path("ietf.bin")
    make_random_file(f, size)
    kinds = ["curl", "ietf -> xfer serve", "ietf -> Apple", "tus -> xfer serve", "patch -> xfer serve"]
    walls = {k: [] for k in kinds}
    cpus = {k: [] for k in kinds}
    servers = {k: [] for k in kinds}
    rss = {k: [] for k in kinds}
    for rnd in range(ROUNDS):
        for k in kinds:
            root = work.fresh("ietf-server")
            server = AppleServer(root) if k == "ietf -> Apple" else Receiver(root)
            state = work.fresh("state")
            if k == "curl":
                args = ["curl", "-sS", "-f", "-o", "/dev/null", "-T", f, server.url + "/raw/curl.bin"]
            elif k == "ietf -> Apple":
                args = push_args(f, "ietf", server.url + "/in/ietf.bin", state)
            elif k.startswith("ietf"):
                args = push_args(f, "ietf", server.url + "/resumable/", state)
            else:
                args = push_args(f, k.split()[0], server.url + ("/files/" if k.startswith("tus") else ""), state)
            try:
                secs, cpu, server_cpu, peak, _ = timed_cpu(args, work, "ietf", server)
                if k == "ietf -> Apple":
                    stored = os.path.getsize(os.path.join(root, "in", "ietf.bin"))
                else:
                    stored = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(root)
                                 for n in names if n in ("ietf.bin", "curl.bin"))
                if stored != size:
                    raise RuntimeError(f"{k}: the server holds {stored} bytes, not {size}")
            finally:
                server.stop()
                shutil.rmtree(root, ignore_errors=True)
            walls[k].append(secs)
            cpus[k].append(cpu)
            servers[k].append(server_cpu)
            rss[k].append(peak)
            log(f"  ietf round {rnd + 1} {k}: {size / MiB / secs:.0f} MiB/s ({secs:.2f} s, client CPU {cpu:.2f} s, "
                f"server CPU {server_cpu:.2f} s, RSS {peak / MiB:.0f} MiB)")
    os.unlink(f)
    bar = median(walls["curl"])
    how = {"curl": "curl -T to xfer serve's /raw: one stream, no chunks (the bar)",
           "ietf -> xfer serve": "8 MiB PATCHes in order, Content-Digest crc32c (asked for), interop 8",
           "ietf -> Apple": "8 MiB PATCHes in order, interop 6 (found by OPTIONS), no digest asked; the server writes without syncing",
           "tus -> xfer serve": "8 MiB x 4 partial uploads, Upload-Checksum crc32c (offered first), concatenated",
           "patch -> xfer serve": "8 MiB x 4, Content-Digest crc32c"}
    rows = []
    for k in kinds:
        m = median(walls[k])
        rows.append([k, how[k], f"{size / MiB / m:.0f}", " ".join(f"{size / MiB / w:.0f}" for w in walls[k]),
                     f"{bar / m:.2f}", f"{median(cpus[k]):.2f}", f"{median(servers[k]):.2f}", f"{median(rss[k]) / MiB:.0f}"])
    RESULTS["ietf"] = {
        "title": (f"IETF resumable uploads: {size // MiB} MiB into xfer serve and Apple's NIOResumableUpload on 127.0.0.1,"
                  f" {ROUNDS} alternating rounds, a fresh server per run"),
        "header": ["client -> server", "how", "median MiB/s", "runs MiB/s", "speed vs curl", "client CPU-s",
                   "server CPU-s", "peak RSS MiB"],
        "rows": rows,
    }
