"""The data path (issue 17): every protocol on 1 GiB against `curl -T`, CPU per GiB, the Content-MD5 bound, peak RSS."""

import os
import re
import shutil
import subprocess
import time
from ..common import (MiB, GiB, ROUNDS, SIZES, log, median, make_random_file, push_args, timed, completed_event,
                      RESULTS, cpu_seconds, timed_cpu)
from ..servers import Receiver, DigestProxy


def openssl_seconds_per_gib():
    """CPU-seconds per GiB of MD5 and of SHA-256 on one core, from `openssl speed` (16 KiB blocks)."""
    out = subprocess.run(["openssl", "speed", "-seconds", "1", "-bytes", "16384", "md5", "sha256"],
                         capture_output=True, text=True, check=True).stdout
    rates = {}
    for line in out.splitlines():
        m = re.match(r"(md5|sha256)\s+([\d.]+)k\s*$", line.strip())
        if m:
            rates[m.group(1)] = float(m.group(2)) * 1000  # openssl's "k" is 1000 bytes
    if set(rates) != {"md5", "sha256"}:
        raise RuntimeError(f"could not read `openssl speed`: {out[-300:]!r}")
    return GiB / rates["md5"], GiB / rates["sha256"]


def bench_datapath(work):
    """Issue 17: patch with the negotiated CRC-32C and with Content-MD5 (through a proxy that
    hides the receiver's Want-Content-Digest), multipart and sequence against `curl -T` to /raw,
    one receiver, alternating; wall time, client and receiver CPU per GiB, peak RSS. Then the
    client's peak RSS at 8 MiB x 4 and 64 MiB x 8 on a small and a large file."""
    size = SIZES["datapath"]
    gib = size / GiB
    f = work.path("datapath.bin")
    make_random_file(f, size)
    recv = Receiver(work.path("datapath-root"))
    proxy = DigestProxy(recv.port)
    kinds = ["curl", "curl via proxy", "curl blocks", "patch crc32c", "patch defaults", "patch md5 via proxy", "multipart",
             "sequence", "multipart defaults", "tus defaults", "ietf defaults"]
    # Sequence's bound: the protocol orders one block at a time per file, each answered once
    # durable, so its bar is one stream of the same blocks, each a PUT /raw (fdatasync'd before its
    # answer) after the one before, on one connection. The blocks are cut once, outside the timing.
    # Sequence's default block for a file this large (`largeFileChunkSize` in SequenceBackend: 64
    # MiB from 512 MiB up): the row is the protocol at its defaults, as the goal says.
    block = 64 * MiB if size >= 512 * MiB else MiB
    blocks_dir = work.path("datapath-blocks")
    os.makedirs(blocks_dir, exist_ok=True)
    block_count = 0
    with open(f, "rb") as source:
        while chunk := source.read(block):
            with open(os.path.join(blocks_dir, f"b{block_count:05}"), "wb") as out:
                out.write(chunk)
            block_count += 1
    blocks_config = work.path("datapath-blocks.cfg")
    # Where each protocol lives on `xfer serve`.
    paths = {"tus": "/files/", "ietf": "/resumable/"}
    runs = {k: [] for k in kinds}  # (wall s, client CPU s, receiver CPU s, proxy CPU s, peak RSS)
    md5_cost, sha_cost = [], []
    try:
        for rnd in range(ROUNDS):
            md5, sha = openssl_seconds_per_gib()
            md5_cost.append(md5)
            sha_cost.append(sha)
            log(f"  datapath round {rnd + 1} openssl speed: MD5 {md5:.2f} s/GiB, SHA-256 {sha:.2f} s/GiB")
            for k in kinds:
                recv.clear()
                os.sync()  # each run waits for its own writes only
                url = proxy.url if "proxy" in k else recv.url
                if k == "curl blocks":
                    with open(blocks_config, "w") as h:
                        for i in range(block_count):
                            h.write(f'upload-file = "{os.path.join(blocks_dir, f"b{i:05}")}"\n'
                                    f'url = "{url}/raw/datapath-{rnd}-b{i:05}"\noutput = "/dev/null"\n')
                    args = ["curl", "-sS", "-f", "-K", blocks_config]
                elif k.startswith("curl"):
                    args = ["curl", "-sS", "-o", "/dev/null", "-f", "-T", f, f"{url}/raw/datapath-{rnd}.bin"]
                elif k == "sequence":
                    args = push_args(f, "sequence", url, work.fresh("state"), chunk=None, concurrency=None)
                elif k.endswith(" defaults"):
                    backend = k.split()[0]
                    args = push_args(f, backend, url + paths.get(backend, ""), work.fresh("state"), chunk=None, concurrency=None)
                else:
                    args = push_args(f, k.split()[0], url, work.fresh("state"))
                stripped = proxy.stripped
                proxy_before = cpu_seconds(proxy.proc.pid)
                wall, cpu, receiver, rss, out = timed_cpu(args, work, "datapath", recv)
                proxy_cpu = cpu_seconds(proxy.proc.pid) - proxy_before
                if k == "curl blocks":
                    # Proven by what the receiver holds: every block, every byte.
                    stored = [n for n in os.listdir(os.path.join(recv.root, "raw")) if n.startswith(f"datapath-{rnd}-b")]
                    got = sum(os.path.getsize(os.path.join(recv.root, "raw", n)) for n in stored)
                    if len(stored) != block_count or got != size:
                        raise RuntimeError(f"{k}: the receiver holds {len(stored)} blocks, {got} bytes of {size}")
                elif k.startswith("curl"):
                    got = os.path.getsize(os.path.join(recv.root, "raw", f"datapath-{rnd}.bin"))
                    if got != size:
                        raise RuntimeError(f"{k}: the receiver holds {got} bytes of {size}")
                else:
                    completed_event(out)
                if k == "patch md5 via proxy" and proxy.stripped == stripped:
                    time.sleep(0.2)  # the proxy's line may still be on its way
                    if proxy.stripped == stripped:
                        raise RuntimeError("the proxy removed no Want-Content-Digest: the MD5 path was not taken")
                runs[k].append((wall, cpu, receiver, proxy_cpu, rss))
                log(f"  datapath round {rnd + 1} {k}: {size / MiB / wall:.0f} MiB/s ({wall:.2f} s), client "
                    f"{cpu / gib:.2f} CPU-s/GiB, receiver {receiver / gib:.2f}, proxy {proxy_cpu / gib:.2f}, "
                    f"RSS {rss / MiB:.0f} MiB")
        recv.clear()

        def med(k, i, per_gib=True):
            return median([r[i] / gib if per_gib else r[i] for r in runs[k]])

        rate = {k: median([size / MiB / r[0] for r in runs[k]]) for k in kinds}
        md5, sha = median(md5_cost), median(sha_cost)
        bound = 1.15 * (med("curl", 1) + md5 + sha)
        # Multipart's bound: its protocol has every fragment MD5'd by the client and again by the
        # receiver. Both can run at once (one core each), and the two cores can do no more than
        # curl's own work plus the two MD5s: the longest of curl's time, one side's MD5 and
        # half of all that CPU.
        curl_wall = median([r[0] for r in runs["curl"]])
        md5_wall = md5 * gib
        shared = (median([r[1] for r in runs["curl"]]) + median([r[2] for r in runs["curl"]]) + 2 * md5_wall) / 2
        md5_bound = size / MiB / max(curl_wall, md5_wall, shared)
        bounds = {"multipart defaults": md5_bound, "sequence": rate["curl blocks"]}
        how = {
            "curl": "`curl -T` to PUT /raw/NAME, one stream, no digest",
            "curl via proxy": "the same through the proxy (what the proxy costs)",
            "curl blocks": f"the file's {block // MiB} MiB blocks, each a `curl -T` PUT /raw after the one before, one connection",
            "patch crc32c": "8 MiB x 4, Content-Digest crc32c (negotiated), no file SHA-256",
            "patch defaults": "no flags: 8 MiB chunks for a file of 64 MiB or more (else 1 MiB) x 5, crc32c",
            "patch md5 via proxy": "8 MiB x 4 through the proxy: Content-MD5, file SHA-256",
            "multipart": "8 MiB x 4, fragmentMd5 per chunk",
            "sequence": f"no flags: {block // MiB} MiB blocks in order, CRC-32 per block",
            "multipart defaults": "no flags",
            "tus defaults": "no flags: one upload a file, PATCHes in order (64 MiB from 512 MiB up), Upload-Checksum crc32c",
            "ietf defaults": "no flags: PATCHes in order, Content-Digest crc32c",
        }
        rows = []
        for k in kinds:
            # A push through the proxy is compared with curl through it; curl through it, with curl.
            base = "curl via proxy" if k == "patch md5 via proxy" else "curl"
            ratio = rate[k] / rate[base]
            goal, met = "-", "-"
            to_bound = rate[k] / bounds[k] if k in bounds else None
            if k == "multipart defaults":
                goal, met = ">= 0.9x its MD5 bound", "yes" if to_bound >= 0.9 else "NO"
            elif k == "sequence":
                goal, met = ">= 0.9x one stream of its blocks", "yes" if to_bound >= 0.9 else "NO"
            elif k == "patch crc32c" or k.endswith(" defaults"):
                goal, met = ">= 0.9x curl MiB/s", "yes" if ratio >= 0.9 else "NO"
            elif k == "patch md5 via proxy":
                goal = f"client <= {bound:.2f} CPU-s/GiB"
                met = "yes" if med(k, 1) <= bound else "NO"
            rows.append([k, how[k], f"{rate[k]:.0f}", " ".join(f"{size / MiB / r[0]:.0f}" for r in runs[k]),
                         f"{ratio:.2f}" + (" (to curl via proxy)" if base != "curl" else ""),
                         f"{to_bound:.2f}" if to_bound is not None else "-",
                         f"{med(k, 1):.2f}", " ".join(f"{r[1] / gib:.2f}" for r in runs[k]),
                         f"{med(k, 2):.2f}", f"{med(k, 3):.2f}" if "proxy" in k else "-",
                         f"{med(k, 4, False) / MiB:.0f}", goal, met])
        RESULTS["datapath"] = {
            "title": (f"Data path: {size // MiB} MiB of random bytes to one `xfer serve` on 127.0.0.1, {ROUNDS} alternating "
                      "rounds (medians); CPU = user + system, the client's from /usr/bin/time, the receiver's and "
                      "the proxy's from /proc"),
            "header": ["sender", "how", "MiB/s", "runs MiB/s", "ratio to curl", "ratio to its bound", "client CPU-s/GiB", "client runs",
                       "receiver CPU-s/GiB", "proxy CPU-s/GiB", "peak RSS MiB", "goal", "met"],
            "rows": rows,
        }
        RESULTS["datapath_hash"] = {
            "title": "Data path: the bound for Content-MD5, `openssl speed -seconds 1 -bytes 16384 md5 sha256` once per round",
            "header": ["measure", "CPU-s/GiB", "runs"],
            "rows": [
                ["MD5 (one core)", f"{md5:.2f}", " ".join(f"{x:.2f}" for x in md5_cost)],
                ["SHA-256 (one core)", f"{sha:.2f}", " ".join(f"{x:.2f}" for x in sha_cost)],
                ["curl's client CPU (table above)", f"{med('curl', 1):.2f}", "-"],
                ["bound: 1.15 x (curl + MD5 + SHA-256)", f"{bound:.2f}", "-"],
                ["patch md5 via proxy, client", f"{med('patch md5 via proxy', 1):.2f}",
                 f"{med('patch md5 via proxy', 1) / bound:.2f} of the bound"],
                ["multipart's MD5 bound, MiB/s: the longest of curl's wall, one side's MD5, half of curl's CPU and "
                 "both MD5s", f"{md5_bound:.0f}",
                 f"curl {curl_wall:.2f} s, MD5 {md5_wall:.2f} s, shared {shared:.2f} s"],
            ],
        }
        os.unlink(f)
        shutil.rmtree(blocks_dir, ignore_errors=True)

        # Peak RSS: two chunkings, each on a small and a large file; patch straight to the receiver (crc32c).
        # The small file of a chunking fills its window (chunk x in flight) so both files run with as
        # many chunks in flight and the ratio shows the file's size alone: a 64 MiB file is a single
        # 64 MiB chunk, which compared one request's curl buffer with eight.
        shapes = [("8MiB", 4), ("64MiB", 8)]
        sizes = {}
        for c, n in shapes:
            small = max(SIZES["datapath_mem_small"], int(c.replace("MiB", "")) * MiB * n)
            sizes[(c, n)] = {"small": small, "large": max(SIZES["datapath_mem_large"], 2 * small)}
        files = {}
        for shape in sizes.values():
            for label, bytes_ in shape.items():
                if bytes_ not in files:
                    files[bytes_] = work.path(f"datapath-mem-{bytes_ // MiB}.bin")
                    make_random_file(files[bytes_], bytes_)
        peaks = {(c, n, label): [] for c, n in shapes for label in ("small", "large")}
        for rnd in range(ROUNDS):
            for c, n in shapes:
                for label, bytes_ in sizes[(c, n)].items():
                    recv.clear()
                    secs, peak, out = timed(push_args(files[bytes_], "patch", recv.url, work.fresh("state"), chunk=c, concurrency=n),
                                            work, "datapath-mem")
                    completed_event(out)
                    peaks[(c, n, label)].append(peak)
                    log(f"  datapath memory round {rnd + 1} {c} x {n} {label}: peak RSS {peak / MiB:.1f} MiB ({secs:.1f} s)")
        recv.clear()
        for path in files.values():
            os.unlink(path)
        rows = []
        for c, n in shapes:
            ms = median(peaks[(c, n, "small")])
            for label, bytes_ in sizes[(c, n)].items():
                m = median(peaks[(c, n, label)])
                ratio = m / ms
                flat = label == "small" or abs(ratio - 1) <= 0.10
                size_text = f"{bytes_ // GiB} GiB" if bytes_ >= GiB else f"{bytes_ // MiB} MiB"
                rows.append([f"{c.replace('MiB', ' MiB')} x {n}", size_text, f"{m / MiB:.1f}",
                             " ".join(f"{p / MiB:.1f}" for p in peaks[(c, n, label)]),
                             "-" if label == "small" else f"{ratio:.2f}",
                             "<= 48 MiB" if label == "small" else "<= 48 MiB, within 10%",
                             "yes" if m <= 48 * MiB and flat else "NO"])
        RESULTS["datapath_memory"] = {
            "title": (f"Data path: peak RSS of `xfer push --backend patch` (/usr/bin/time -v), {ROUNDS} alternating rounds"),
            "header": ["chunks in flight", "file", "median peak RSS MiB", "runs MiB", "ratio to the small file", "goal", "met"],
            "rows": rows,
        }
    finally:
        proxy.stop()
        recv.stop()
