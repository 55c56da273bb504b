"""A real S3 store (issue 19): xfer against s5cmd, aws-cli and rclone into Ceph's RADOS Gateway."""

import json
import os
import shutil
import signal
import subprocess
from ..common import MiB, ROUNDS, SIZES, log, median, XFER, make_random_file, sha256_file, RESULTS, make_tree
from ..servers import S3_PYTHON, CEPH_ENV, S5CMD, Ceph, s3_clients, run_measured
from ..system import sh


def bench_ceph(work):
    """Against a real S3 store (Ceph's RADOS Gateway on this machine): one 1 GiB file and a tree of
    small files, xfer vs s5cmd vs aws-cli vs rclone, alternating; then kill -9 at half and resume."""
    if not os.path.exists(S5CMD):
        raise RuntimeError(f"{S5CMD} is missing (make bench installs it)")
    ceph = Ceph(work.path("ceph"))
    try:
        size, files = SIZES["ceph"], SIZES["ceph_files"]
        big = work.path("ceph.bin")
        make_random_file(big, size)
        tree = work.path("ceph-tree")
        make_tree(tree, files)
        kinds = ["xfer", "s5cmd", "aws", "rclone"]
        versions = {"xfer": "this build, its defaults (16 parts or 64 small requests in flight; over http the signed SHA-256 checks each part)",
                    "s5cmd": "s5cmd " + sh(f"{S5CMD} version").split("-")[0] + ", its defaults",
                    "aws": "aws-cli " + sh(f"{S3_PYTHON} -c 'import awscli;print(awscli.__version__)'") + ", its defaults",
                    "rclone": sh("rclone version | head -1").replace("rclone ", "") + ", its defaults"}
        parts_expected = (size + 8 * MiB - 1) // (8 * MiB)

        one = {k: [] for k in kinds}
        for rnd in range(ROUNDS):
            for k in kinds:
                bucket = ceph.bucket()
                args, env = s3_clients(k, big, bucket, "one.bin", ceph.url, work)
                measured = run_measured(args, env, work, f"ceph-one-{k}-{rnd}", ceph)
                head = ceph.head(bucket, "one.bin")
                # The same part size for all: a multipart object's ETag ends in its part count.
                if head["size"] != size or not head["etag"].strip('"').endswith(f"-{parts_expected}"):
                    raise RuntimeError(f"{k}: the object is {head} (expected {size} bytes in {parts_expected} parts)")
                ceph.empty(bucket)
                one[k].append(measured)
                log(f"  ceph 1 file round {rnd + 1} {k}: {size / MiB / measured[0]:.0f} MiB/s ({measured[0]:.2f} s, "
                    f"CPU {measured[1]:.2f} s, gateway {measured[2]:.2f} s, RSS {measured[3] / MiB:.0f} MiB)")

        many = {k: [] for k in kinds}
        for rnd in range(ROUNDS):
            for k in kinds:
                bucket = ceph.bucket()
                args, env = s3_clients(k, tree, bucket, "t", ceph.url, work, tree=True)
                measured = run_measured(args, env, work, f"ceph-tree-{k}-{rnd}", ceph)
                count = ceph.count(bucket)
                if count != files:
                    raise RuntimeError(f"{k}: {count} objects of {files}")
                ceph.empty(bucket)
                many[k].append(measured)
                log(f"  ceph {files} files round {rnd + 1} {k}: {files / measured[0]:.0f} files/s ({measured[0]:.2f} s, "
                    f"CPU {measured[1]:.2f} s, gateway {measured[2]:.2f} s, RSS {measured[3] / MiB:.0f} MiB)")

        def rows(results, unit, rate):
            base = median([rate(m) for m in results["s5cmd"]])
            out = []
            for k in kinds:
                rates = [rate(m) for m in results[k]]
                out.append([k, versions[k], f"{median(rates):.0f}", " ".join(f"{r:.0f}" for r in rates),
                            f"{median(rates) / base:.2f}", f"{median([m[1] for m in results[k]]):.2f}",
                            f"{median([m[2] for m in results[k]]):.2f}", f"{median([m[3] for m in results[k]]) / MiB:.0f}"])
            return out

        header = lambda unit: ["client", "how", f"median {unit}", f"runs {unit}", "÷ s5cmd", "client CPU s",
                               "gateway+OSD CPU s", "client peak RSS MiB"]
        ceph_version = sh("ceph --version").split(" (")[0]
        RESULTS["ceph"] = {
            "title": (f"10. A real S3 store: {size // MiB} MiB, one file, into {ceph_version}'s RADOS Gateway on 127.0.0.1 "
                      f"(one monitor, one bluestore OSD, sharing the 2 cores), 8 MiB parts, {ROUNDS} alternating rounds"),
            "header": header("MiB/s"), "rows": rows(one, "MiB/s", lambda m: size / MiB / m[0]),
        }
        RESULTS["ceph_tree"] = {
            "title": f"{files:,} files of 4 KiB (100 to a directory), a directory pushed, same gateway, {ROUNDS} alternating rounds",
            "header": header("files/s"), "rows": rows(many, "files/s", lambda m: files / m[0]),
        }

        # kill -9 at half, then resume: what is sent again is at most what was in flight.
        bucket = ceph.bucket()
        state = work.fresh("state-ceph-kill")
        args = [XFER, "push", big, "--backend", "s3", "--to", f"s3://{bucket}/killed.bin", "--endpoint", ceph.url,
                "--state", state, "--chunk-size", "8MiB", "--json"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=CEPH_ENV, text=True)
        acknowledged, job = 0, None
        for line in proc.stdout:
            event = json.loads(line) if line.startswith("{") else {}
            job = event.get("job", job) if event.get("event") == "started" else job
            if event.get("event") == "chunk":
                acknowledged += 1
                if acknowledged >= parts_expected // 2:
                    proc.send_signal(signal.SIGKILL)
                    break
        proc.wait()
        status = subprocess.run([XFER, "status", job, "--json", "--state", state], capture_output=True, text=True)
        concurrency = json.loads(status.stdout)["concurrency"]
        resumed = subprocess.run(args, capture_output=True, text=True, env=CEPH_ENV)
        if resumed.returncode != 0:
            raise RuntimeError(f"the resume failed: {resumed.stderr.strip()[-300:]}")
        sent_again = sum(1 for line in resumed.stdout.splitlines() if '"event":"chunk"' in line)
        # Parts in flight at the kill: sent again, or found by ListParts (the gateway stored them).
        resent = max(0, sent_again - (parts_expected - acknowledged))
        found = max(0, (parts_expected - acknowledged) - sent_again)
        identical = ceph.sha256(bucket, "killed.bin") == sha256_file(big)
        if not identical:
            raise RuntimeError("the resumed object is not byte-identical")
        RESULTS["ceph_kill"] = {
            "title": f"kill -9 at half of the {size // MiB} MiB push, then the same command again (xfer, its defaults)",
            "header": ["parts", "acknowledged before the kill", "parts sent by the resume",
                       "in flight, found stored by ListParts", "re-sent", "bound (in flight × part)",
                       "object byte-identical (SHA-256 of a download)"],
            "rows": [[parts_expected, acknowledged, sent_again, found, f"{resent} parts = {resent * 8} MiB",
                      f"{concurrency} × 8 MiB = {concurrency * 8} MiB", "yes"]],
        }
        os.unlink(big)
        shutil.rmtree(tree)
    finally:
        ceph.stop()
