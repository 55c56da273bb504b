"""The run: every section in order (or those ONLY= names), the generated blocks of Docs/benchmarks.md,
then the goals registry (Benchmarks/goals.json) and the goals table at the top of the doc."""

import datetime
import os
import shutil
import time

from . import goals
from .common import BIN, QUICK, REPO, RESULTS, ROUNDS, ONLY, Work, log
from .report import machine, table, write_doc, write_goals, earlier_core_tables, CORE_TABLES, OWN_BLOCK
from .servers import Receiver
from .sections.throughput import bench_throughput
from .sections.memory import bench_memory
from .sections.smallchunks import bench_small_chunks
from .sections.resume import bench_resume
from .sections.listing import bench_list
from .sections.resend import bench_resend
from .sections.s3 import bench_s3
from .sections.tus import bench_tus
from .sections.trees import bench_trees
from .sections.datapath import bench_datapath
from .sections.stream import bench_stream
from .sections.ceph import bench_ceph
from .sections.ietf import bench_ietf
from .sections.objectstore import bench_objectstore
from .sections.pull import bench_pull
from .sections.pullceph import bench_pull_ceph
from .sections.far import bench_far
from .sections.hostile import bench_hostile
from .sections.sync import bench_sync
from .sections.binary import bench_binary


def bench_command():
    """The run's command for the stamps and the goals table: BENCH_COMMAND (the Makefile sets it), with
    ROUNDS= added when it was set, or else the `make bench` line that does what this run does."""
    command = os.environ.get("BENCH_COMMAND")
    rounds = os.environ.get("ROUNDS")
    if command:
        return command if not rounds or "ROUNDS=" in command else f"ROUNDS={rounds} {command}"
    words = [f"{name}={os.environ[name]}" for name in ("ONLY", "QUICK", "ROUNDS", "BUILD_DIR", "STORE_BENCH_DIR")
             if os.environ.get(name) and not (name == "QUICK" and not QUICK)]
    return " ".join(words + ["make bench"])


def main():
    command = bench_command()
    started = datetime.datetime.now(datetime.timezone.utc)
    work = Work()
    failures = []
    recv = Receiver(work.path("root"))
    plan = [
        ("throughput", lambda: bench_throughput(work, recv)),
        ("memory", lambda: bench_memory(work, recv)),
        ("small", lambda: bench_small_chunks(work, recv)),
        ("resume", lambda: bench_resume(work)),
        ("list", lambda: bench_list(work, recv)),
        ("resend", lambda: bench_resend(work, recv)),
        ("s3", lambda: bench_s3(work)),
        ("tus", lambda: bench_tus(work)),
        ("trees", lambda: bench_trees(work)),
        ("datapath", lambda: bench_datapath(work)),
        ("stream", lambda: bench_stream(work)),
        ("ceph", lambda: bench_ceph(work)),
        ("ietf", lambda: bench_ietf(work)),
        ("objectstore", lambda: bench_objectstore(work)),
        ("pull", lambda: bench_pull(work, recv)),
        ("pullceph", lambda: bench_pull_ceph(work)),
        ("far", lambda: bench_far(work)),
        ("hostile", lambda: bench_hostile(work)),
        ("sync", lambda: bench_sync(work)),
        ("binary", lambda: bench_binary(work)),
    ]
    ran = []
    try:
        for name, run in plan:
            if ONLY and name not in ONLY:
                continue
            log(f"== {name}")
            t = time.monotonic()
            ran.append(name)
            try:
                run()
            except Exception as error:  # report and go on: a subset with honest numbers beats nothing
                failures.append(f"{name}: {error}")
                log(f"  FAILED: {error}")
            log(f"  ({time.monotonic() - t:.0f} s)")
    finally:
        recv.stop()
        if not os.environ.get("KEEP"):
            shutil.rmtree(work.dir, ignore_errors=True)
    took = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    stamp = (f"Generated {started.strftime('%Y-%m-%d %H:%M UTC')} by `{command}` ({'QUICK, ' if QUICK else ''}"
             f"{ROUNDS} rounds, took {took / 60:.1f} min), binaries from `{os.path.relpath(BIN, REPO)}`.")
    printed = []
    core = [key for key in CORE_TABLES if key in RESULTS]
    core_failures = [f for f in failures if f.split(":")[0] not in OWN_BLOCK]
    if core or core_failures:
        earlier = earlier_core_tables()  # the tables of sections 1-5 this run did not measure stay, with their run
        parts = [stamp, "", "### Machine", "", table(["", ""], machine())]
        for key in CORE_TABLES:
            if key in RESULTS:
                parts += ["", f"### {RESULTS[key]['title']}", "", table(RESULTS[key]["header"], RESULTS[key]["rows"])]
            elif key in earlier:
                parts += ["", earlier[key]]
        if core_failures:
            parts += ["", "### Failed or skipped", ""] + [f"- {f}" for f in core_failures]
        write_doc("\n".join(parts))
        printed.append("\n".join(parts))
    for key in OWN_BLOCK:
        failed = [f for f in failures if f.split(":")[0] == key]
        if key in RESULTS:
            parts = []
            # A section may have several tables (trees: the 10,000-file rounds and the large tree).
            for name in [key] + [k for k in RESULTS if k.startswith(key + "_")]:
                parts += [f"### {RESULTS[name]['title']}", "", table(RESULTS[name]["header"], RESULTS[name]["rows"]), ""]
            text = "\n".join(parts[:2] + [stamp + " Machine as above.", ""] + parts[2:]).rstrip()
            write_doc(text, section=key)
            printed.append(text)
        elif failed:
            printed.append("\n".join(f"- {f}" for f in failed))  # a failed run leaves the last figures in place
    # Each section that ran records the goals its tables show (a section that failed part way records
    # what it measured); every other goal keeps its last record. Then the table at the top of the doc.
    stamp_date = started.strftime('%Y-%m-%d %H:%M UTC')
    records = goals.load()
    for name in ran:
        records = goals.record(records, name, RESULTS, command, stamp_date, log=log)
    records = goals.save(records)
    write_goals(records)
    printed.insert(0, f"Goals: {sum(r['met'] for r in records)} of {len(records)} met (Benchmarks/goals.json, "
                      "the table at the top of Docs/benchmarks.md).")
    print("\n\n".join(printed))
    return 1 if failures else 0

