"""The receiver on an object store (issue 29): `xfer serve --storage s3://` on Ceph, one and two instances."""

import os
import re
import shutil
import subprocess
import time
from ..common import (MiB, ROUNDS, SIZES, log, median, XFER, make_random_file, parse_time_v, RESULTS, cpu_seconds,
                      parse_cpu_v, make_tree)
from ..servers import Receiver, CEPH_ENV, S5CMD, Ceph, s3_clients, Balancer, free_port


def bench_objectstore(work):
    """`xfer serve --storage s3://` on the Ceph gateway, one and two instances (haproxy round robin),
    beside s5cmd straight to the gateway (the store's own limit) and `xfer serve` on disk, alternating."""
    if not os.path.exists(S5CMD):
        raise RuntimeError(f"{S5CMD} is missing (make bench installs it)")
    ceph = Ceph(work.path("ceph-objectstore"))
    try:
        size, files = SIZES["objectstore"], SIZES["objectstore_files"]
        big = work.path("objectstore.bin")
        make_random_file(big, size)
        tree = work.path("objectstore-tree")
        make_tree(tree, files)

        def receivers(bucket, count):
            storage = ("--storage", f"s3://{bucket}/r", "--endpoint", ceph.url)
            if count == 1:
                servers = [Receiver(work.fresh("os-root"), extra=storage, env=CEPH_ENV)]
                return servers, None, servers[0].url
            # Behind the balancer, the receivers' links name it (--public-url), as receivers behind
            # one are told: every request of an upload goes through it.
            ports = [free_port() for _ in range(count)]
            balancer = Balancer(ports, work.dir)
            servers = [Receiver(work.fresh("os-root"), port=port, extra=storage + ("--public-url", balancer.url), env=CEPH_ENV)
                       for port in ports]
            balancer.wait_until_serving()
            return servers, balancer, balancer.url

        def run(kind, source, is_tree, backend):
            """(wall s, client CPU s, receivers CPU s, gateway+OSD CPU s, receivers peak RSS, store requests per file)."""
            bucket = ceph.bucket()
            servers, balancer = [], None
            if kind == "s5cmd":
                args, env = s3_clients("s5cmd", source, bucket, "t" if is_tree else "one.bin", ceph.url, work, tree=is_tree)
                url = None
            else:
                if kind == "disk":
                    servers, url = [Receiver(work.fresh("os-disk"))], None
                    url = servers[0].url
                else:
                    servers, balancer, url = receivers(bucket, 2 if kind == "s3x2" else 1)
                target = url + ("/resumable/" if backend == "ietf" else "/files/" if backend == "tus" else "")
                args = [XFER, "push", source, "--backend", backend, "--to", target, "--state", work.fresh("state-os"), "--quiet"]
                env = None
            try:
                before = [cpu_seconds(r.proc.pid) for r in servers]
                requests_before = sum(r.counters().get("storeRequests", 0) for r in servers)
                tv = work.path("time-os.txt")
                gateway = ceph.cpu()
                start = time.monotonic()
                out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True, env=env)
                wall = time.monotonic() - start
                gateway = ceph.cpu() - gateway
                if out.returncode != 0:
                    raise RuntimeError(f"{kind} {backend}: exited {out.returncode}: {out.stderr.strip()[-300:]}")
                received_cpu = sum(cpu_seconds(r.proc.pid) - b for r, b in zip(servers, before))
                store_requests = sum(r.counters().get("storeRequests", 0) for r in servers) - requests_before
                rss = max((int(re.search(r"VmHWM:\s+(\d+)", open(f"/proc/{r.proc.pid}/status").read()).group(1)) * 1024
                           for r in servers), default=0)
                # Proof of work: the objects are in the bucket (or the files on disk), each of the right size.
                expected = files if is_tree else 1
                if kind == "s5cmd":
                    found = ceph.count(bucket)
                elif kind == "disk":
                    found = sum(len(f) for _, _, f in os.walk(os.path.join(servers[0].root, "downloads")))
                else:
                    found = ceph.count_prefix(bucket, "r/files/")
                if found != expected:
                    raise RuntimeError(f"{kind} {backend}: {found} objects of {expected}")
                if kind in ("s3", "s3x2") and ceph.uploads_in_progress(bucket):
                    raise RuntimeError(f"{kind} {backend}: multipart uploads left unfinished")
                peak, _ = parse_time_v(tv)
                return wall, parse_cpu_v(tv), received_cpu, gateway, rss, store_requests / expected, peak
            finally:
                for r in servers:
                    r.stop()
                if balancer:
                    balancer.stop()
                ceph.empty(bucket)

        plans = {
            "one": [("s5cmd", None), ("s3", "patch"), ("s3x2", "patch"), ("disk", "patch")],
            "tree": [("s5cmd", None), ("s3", "ietf"), ("s3x2", "ietf"), ("s3", "patch"), ("disk", "ietf")],
        }
        results = {name: {plan: [] for plan in plans[name]} for name in plans}
        for rnd in range(ROUNDS):
            for name, source, is_tree in (("one", big, False), ("tree", tree, True)):
                for kind, backend in plans[name]:
                    measured = run(kind, source, is_tree, backend or "patch")
                    results[name][(kind, backend)].append(measured)
                    unit = files / measured[0] if is_tree else size / MiB / measured[0]
                    log(f"  objectstore {name} round {rnd + 1} {kind} {backend or ''}: {unit:.0f} {'files/s' if is_tree else 'MiB/s'} "
                        f"({measured[0]:.2f} s, store requests/file {measured[5]:.1f})")

        how = {"s5cmd": "s5cmd straight to the gateway (its defaults)", "s3": "xfer → 1 × xfer serve --storage s3://",
               "s3x2": "xfer → haproxy → 2 × xfer serve --storage s3://", "disk": "xfer → xfer serve on disk"}

        def rows(name, rate):
            base = median([rate(m) for m in results[name][("s5cmd", None)]])
            out = []
            for kind, backend in plans[name]:
                ms = results[name][(kind, backend)]
                rates = [rate(m) for m in ms]
                out.append([how[kind], backend or "—", f"{median(rates):.0f}", " ".join(f"{r:.0f}" for r in rates),
                            f"{median(rates) / base:.2f}", f"{median([m[1] for m in ms]):.2f}",
                            f"{median([m[2] for m in ms]):.2f}", f"{median([m[3] for m in ms]):.2f}",
                            f"{median([m[4] for m in ms]) / MiB:.0f}" if kind != "s5cmd" else "—",
                            f"{median([m[5] for m in ms]):.1f}" if kind in ("s3", "s3x2") else "—"])
            return out

        header = lambda unit: ["path", "protocol", f"median {unit}", f"runs {unit}", "÷ s5cmd direct", "client CPU s",
                               "receivers CPU s", "gateway+OSD CPU s", "receiver peak RSS MiB", "store requests per file"]
        RESULTS["objectstore"] = {
            "title": (f"11. The receiver on an object store: {size // MiB} MiB, one file, through `xfer serve --storage s3://` "
                      f"into the Ceph gateway (xfer at its defaults), {ROUNDS} alternating rounds"),
            "header": header("MiB/s"), "rows": rows("one", lambda m: size / MiB / m[0]),
        }
        RESULTS["objectstore_tree"] = {
            "title": f"{files:,} files of 4 KiB through the same receivers (xfer at its defaults), {ROUNDS} alternating rounds",
            "header": header("files/s"), "rows": rows("tree", lambda m: files / m[0]),
        }

        # Memory: 64 uploads' 8 MiB chunks in flight at once through one receiver (4 pushes × 16).
        bucket = ceph.bucket()
        servers, _, url = receivers(bucket, 1)
        try:
            mem_file = work.path("objectstore-memory.bin")
            make_random_file(mem_file, SIZES["objectstore_memory"])
            pushes = [subprocess.Popen([XFER, "push", mem_file, "--backend", "patch", "--to", url, "--state", work.fresh("state-mem"),
                                        "--chunk-size", "8MiB", "--concurrency", "16", "--quiet"]) for _ in range(4)]
            statuses = [p.wait() for p in pushes]
            if any(statuses):
                raise RuntimeError(f"memory pushes exited {statuses}")
            rss = int(re.search(r"VmHWM:\s+(\d+)", open(f"/proc/{servers[0].proc.pid}/status").read()).group(1)) * 1024
            if ceph.count_prefix(bucket, "r/files/") != 4:
                raise RuntimeError("memory pushes: not every object is in the bucket")
            RESULTS["objectstore_memory"] = {
                "title": "the receiver's memory with 64 chunks of 8 MiB in flight (4 pushes × --concurrency 16, patch)",
                "header": ["file per push", "receiver peak RSS MiB", "goal"],
                "rows": [[f"{SIZES['objectstore_memory'] // MiB} MiB", f"{rss / MiB:.0f}", "≤ 128 MiB"]],
            }
        finally:
            for r in servers:
                r.stop()
            ceph.empty(bucket)
        os.unlink(big)
        shutil.rmtree(tree)
    finally:
        ceph.stop()
