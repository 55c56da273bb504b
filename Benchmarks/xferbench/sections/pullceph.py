"""Downloads (issue 31) from the Ceph gateway: xfer pull against s5cmd and aws-cli."""

import os
import shutil
import subprocess
import time
from ..common import (MiB, ROUNDS, SIZES, log, median, XFER, make_random_file, sha256_file, parse_time_v, RESULTS,
                      parse_cpu_v, make_tree)
from ..servers import S3_PYTHON, CEPH_ENV, S5CMD, Ceph
from ..system import sh


def bench_pull_ceph(work):
    """Downloads from a real S3 store (Ceph's RADOS Gateway on this machine): one 1 GiB object and
    10,000 objects of 4 KiB under a prefix, xfer pull vs s5cmd cp vs aws s3 cp at their defaults,
    alternating rounds; each timed until its files are on disk (its run, then a sync of the
    filesystem), each result checked (SHA-256 of the object, the count of files written)."""
    if not os.path.exists(S5CMD):
        raise RuntimeError(f"{S5CMD} is missing (make bench installs it)")
    ceph = Ceph(work.path("ceph-pull"))
    try:
        size, files = SIZES["ceph"], SIZES["ceph_files"]
        big = work.path("ceph-pull.bin")
        make_random_file(big, size)
        expected = sha256_file(big)
        tree = work.path("ceph-pull-tree")
        make_tree(tree, files)
        bucket = ceph.bucket()
        for args in ([S5CMD, "--endpoint-url", ceph.url, "cp", big, f"s3://{bucket}/one.bin"],
                     [S5CMD, "--endpoint-url", ceph.url, "cp", os.path.join(tree, "*"), f"s3://{bucket}/t/"]):
            out = subprocess.run(args, env=CEPH_ENV, capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"seeding the bucket failed: {out.stderr.strip()[-300:]}")
        if ceph.count(bucket) != files + 1:
            raise RuntimeError(f"the bucket holds {ceph.count(bucket)} objects, not {files + 1}")
        os.unlink(big)
        shutil.rmtree(tree)

        def command(kind, source, into, is_tree):
            env = dict(CEPH_ENV)
            if kind == "xfer":
                args = [XFER, "pull", source + ("/" if is_tree else ""), into + "/", "--endpoint", ceph.url,
                        "--state", work.fresh("state-ceph-pull"), "--quiet"]
            elif kind == "s5cmd":
                args = [S5CMD, "--endpoint-url", ceph.url, "cp", source + ("/*" if is_tree else ""), into + "/"]
            else:
                args = [S3_PYTHON, "-m", "awscli", "s3", "cp", source + ("/" if is_tree else ""), into + "/",
                        "--endpoint-url", ceph.url, "--only-show-errors"] + (["--recursive"] if is_tree else [])
            return args, env

        def measure(kind, source, is_tree, label):
            into = work.fresh("ceph-pull-into")
            args, env = command(kind, source, into, is_tree)
            tv = work.path(f"time-{label}.txt")
            start = time.monotonic()
            out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True, env=env)
            if out.returncode != 0:
                raise RuntimeError(f"{label} exited {out.returncode}: {out.stderr.strip()[-300:]}")
            os.sync()
            elapsed = time.monotonic() - start
            peak, _ = parse_time_v(tv)
            if is_tree:
                written = sum(len(f) for _, _, f in os.walk(into))
                if written != files:
                    raise RuntimeError(f"{kind} wrote {written} files of {files}")
            elif sha256_file(os.path.join(into, "one.bin")) != expected:
                raise RuntimeError(f"{kind}: one.bin is not the object")
            shutil.rmtree(into)
            return elapsed, parse_cpu_v(tv), peak

        kinds = ["xfer", "s5cmd", "aws"]
        versions = {"xfer": "this build, its defaults (16 ranges of 8 MiB; 64 small objects in flight)",
                    "s5cmd": "s5cmd " + sh(f"{S5CMD} version").split("-")[0] + ", its defaults",
                    "aws": "aws-cli " + sh(f"{S3_PYTHON} -c 'import awscli;print(awscli.__version__)'") + ", its defaults"}
        one = {k: [] for k in kinds}
        many = {k: [] for k in kinds}
        for rnd in range(ROUNDS):
            for k in kinds:
                one[k].append(measure(k, f"s3://{bucket}/one.bin", False, f"ceph-pull-one-{k}-{rnd}"))
                log(f"  ceph pull 1 object round {rnd + 1} {k}: {size / MiB / one[k][-1][0]:.0f} MiB/s "
                    f"(CPU {one[k][-1][1]:.2f} s, RSS {one[k][-1][2] / MiB:.0f} MiB)")
            for k in kinds:
                many[k].append(measure(k, f"s3://{bucket}/t", True, f"ceph-pull-tree-{k}-{rnd}"))
                log(f"  ceph pull {files} objects round {rnd + 1} {k}: {files / many[k][-1][0]:.0f} files/s "
                    f"(CPU {many[k][-1][1]:.2f} s, RSS {many[k][-1][2] / MiB:.0f} MiB)")

        def rows(results, rate):
            base = median([rate(m) for m in results["s5cmd"]])
            return [[k, versions[k], f"{median([rate(m) for m in results[k]]):.0f}",
                     " ".join(f"{rate(m):.0f}" for m in results[k]), f"{median([rate(m) for m in results[k]]) / base:.2f}",
                     f"{median([m[1] for m in results[k]]):.2f}", f"{median([m[2] for m in results[k]]) / MiB:.0f}"]
                    for k in kinds]

        header = lambda unit: ["client", "how", f"median {unit}", f"runs {unit}", "÷ s5cmd", "client CPU s", "peak RSS MiB"]
        RESULTS["pullceph"] = {
            "title": (f"13. Downloads from a real S3 store: one {size // MiB} MiB object from Ceph's RADOS Gateway on 127.0.0.1, "
                      f"each timed until its file is on disk (its run, then sync), {ROUNDS} alternating rounds"),
            "header": header("MiB/s"), "rows": rows(one, lambda m: size / MiB / m[0]),
        }
        RESULTS["pullceph_tree"] = {
            "title": f"{files:,} objects of 4 KiB under a prefix, same gateway, files written counted, {ROUNDS} alternating rounds",
            "header": header("files/s"), "rows": rows(many, lambda m: files / m[0]),
        }
    finally:
        ceph.stop()
