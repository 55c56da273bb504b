"""Trees (issue 15): 10,000 small files against curl, then 100,000 at scale."""

import os
import queue
import shutil
import subprocess
import threading
import time
from ..common import (MiB, ROUNDS, REPEATS, SIZES, log, median, XFER, completed_event, RESULTS, read_events,
                      make_tree, tree_files, timed_cpu)
from ..servers import Receiver


def bench_trees(work):
    count = SIZES["tree_files"]
    large = SIZES["tree_large"]
    # A fresh receiver root for every run, all deleted at the end: on this machine's ext4
    # (mounted with `discard`) deleting 10,000 files just before a run made creating them again
    # up to twice as costly for both senders, so each run waits (os.sync) for nothing but itself.
    roots = []
    port = [0]  # every receiver of the section on the first one's port (the curl config names it)

    def fresh_receiver():
        roots.append(work.fresh("tree-root"))
        started = Receiver(roots[-1], port=port[0])
        port[0] = started.port
        return started

    recv = fresh_receiver()
    tree = work.path("tree")
    small_tree, large_tree = tree, work.path("tree-large")
    make_tree(tree, count)
    curl_config = work.path("curl.cfg")
    with open(curl_config, "w") as h:
        for path, rel in tree_files(tree):
            h.write(f'upload-file = "{path}"\nurl = "{recv.url}/raw/{rel.replace("/", "-")}"\noutput = "/dev/null"\n')
    # The senders: curl one file at a time and 8 at once (each file a PUT /raw, which pays its own
    # fdatasync), xfer at the flags of earlier runs, and xfer at the defaults a user gets (issue 30).
    senders = {
        "curl": ("curl, one process, -T each to /raw (keep-alive)", ["curl", "-sS", "-f", "-K", curl_config]),
        "curl8": ("curl --parallel --parallel-max 8, -T each to /raw",
                  ["curl", "-sS", "-f", "--parallel", "--parallel-max", "8", "-K", curl_config]),
        "xfer": ("xfer push DIR, patch, -c 8", ["--backend", "patch", "--concurrency", "8"]),
        "patch": ("xfer push DIR, patch, its defaults", ["--backend", "patch"]),
        "ietf": ("xfer push DIR, ietf, its defaults", ["--backend", "ietf"]),
    }
    kinds = list(senders)
    runs = {k: [] for k in kinds}
    try:
        for rnd in range(ROUNDS):
            for k in kinds:
                recv.stop()
                recv = fresh_receiver()
                os.sync()
                if k.startswith("curl"):
                    args = senders[k][1]
                else:
                    target = recv.url + ("/resumable/" if k == "ietf" else "")
                    args = [XFER, "push", tree, *senders[k][1], "--to", target, "--state", work.fresh("tree-state"), "--json"]
                wall, cpu, receiver, rss, out = timed_cpu(args, work, "tree-" + k, recv)
                if k.startswith("curl"):
                    # A baseline that fails fast looks fast: every file must be stored.
                    stored = len(os.listdir(os.path.join(roots[-1], "raw")))
                    if stored != count:
                        raise RuntimeError(f"{k} stored {stored} files of {count}")
                else:
                    files = completed_event(out)["files"]
                    if len(files) != count:
                        raise RuntimeError(f"xfer reported {len(files)} files of {count}")
                runs[k].append((wall, cpu, receiver, rss))
                log(f"  trees round {rnd + 1} {k}: {count / wall:.0f} files/s, client {cpu * 1000 / count:.2f} CPU-ms/file, "
                    f"receiver {receiver * 1000 / count:.2f} CPU-ms/file, RSS {rss / MiB:.0f} MiB")
        rows = []
        curl_rate = median([count / r[0] for r in runs["curl"]])
        curl8_rate = median([count / r[0] for r in runs["curl8"]])
        # Issue 46: each file's cost at both ends against curl's per request, in the same run.
        curl8_client = median([r[1] * 1000 / count for r in runs["curl8"]])
        curl8_receiver = median([r[2] * 1000 / count for r in runs["curl8"]])
        goals = {
            "xfer": (">= 1000 files/s, <= 0.5 ms client, <= 0.5 ms receiver",
                     lambda rate, client, receiver: rate >= 1000 and client <= 0.5 and receiver <= 0.5),
            "patch": (">= 1.0x curl --parallel-max 8, client <= 1.2x its",
                      lambda rate, client, receiver: rate >= curl8_rate and client <= 1.2 * curl8_client),
            "ietf": (">= 1.3x curl --parallel-max 8, client <= 1.2x its, receiver <= 1.3x its",
                     lambda rate, client, receiver: rate >= 1.3 * curl8_rate and client <= 1.2 * curl8_client
                     and receiver <= 1.3 * curl8_receiver),
        }
        for k in kinds:
            rate = median([count / r[0] for r in runs[k]])
            client = median([r[1] * 1000 / count for r in runs[k]])
            receiver = median([r[2] * 1000 / count for r in runs[k]])
            goal = goals.get(k)
            rows.append([
                senders[k][0], f"{rate:.0f}", " ".join(f"{count / r[0]:.0f}" for r in runs[k]), f"{rate / curl_rate:.2f}",
                f"{rate / curl8_rate:.2f}", f"{client:.3f}", f"{receiver:.3f}", f"{median([r[3] for r in runs[k]]) / MiB:.0f}",
                goal[0] if goal else "-", ("yes" if goal[1](rate, client, receiver) else "NO") if goal else "-"])
        RESULTS["trees"] = {
            "title": (f"Trees: {count} files of 4 KiB in {count // 100} directories to `xfer serve` on 127.0.0.1, "
                      f"{ROUNDS} alternating rounds (medians); CPU from /usr/bin/time and the receiver's /proc; "
                      f"curl's files counted in the receiver"),
            "header": ["sender", "files/s", "runs", "ratio to curl", "ratio to curl -Z 8", "client CPU-ms/file",
                       "receiver CPU-ms/file", "peak RSS MiB", "goal", "met"],
            "rows": rows,
        }
        # The large tree: linear wall time, bounded memory and state, fast list/status, fast resume.
        # Nothing is deleted just before it either (see the roots above): the small runs' roots
        # and tree go at the end of the section, with its own.
        recv.stop()
        tree = large_tree
        make_tree(tree, large)
        recv = fresh_receiver()
        os.sync()
        state = work.fresh("tree-large-state")
        args = [XFER, "push", tree, "--backend", "patch", "--to", recv.url, "--state", state, "--json", "--concurrency", "8",
                "--keep-finished", "7d"]
        wall, cpu, receiver, rss, out = timed_cpu(args, work, "tree-large", recv)
        job = completed_event(out)["job"]
        state_bytes = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(state) for f in fs)
        small_wall = median([r[0] for r in runs["xfer"]])
        list_times, status_times = [], []
        for _ in range(REPEATS):
            t = time.monotonic()
            subprocess.run([XFER, "list", "--all", "--state", state], capture_output=True, check=True)
            list_times.append(time.monotonic() - t)
            t = time.monotonic()
            subprocess.run([XFER, "status", job, "--state", state], capture_output=True, check=True)
            status_times.append(time.monotonic() - t)
        # Killed half way, then re-run: spawn to the first chunk the receiver acknowledges.
        recv.stop()
        recv = fresh_receiver()
        state = work.fresh("tree-kill-state")
        args = [XFER, "push", tree, "--backend", "patch", "--to", recv.url, "--state", state, "--json", "--concurrency", "8"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        events = queue.Queue()
        threading.Thread(target=read_events, args=(proc, events), daemon=True).start()
        done = 0
        while done < large // 2:
            _, ev = events.get(timeout=600)
            if ev.get("event") == "eof":
                raise RuntimeError("the push to kill half way ended by itself")
            if ev.get("event") == "fileCompleted":
                done += 1
        proc.kill()
        proc.wait()
        resume_times = []
        for _ in range(3):
            t0 = time.monotonic()
            proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            events = queue.Queue()
            threading.Thread(target=read_events, args=(proc, events), daemon=True).start()
            while True:
                at, ev = events.get(timeout=600)
                if ev.get("event") == "eof":
                    raise RuntimeError("the resumed push ended before sending a chunk")
                if ev.get("event") == "chunk":
                    resume_times.append(at - t0)
                    break
            proc.kill()
            proc.wait()
        ratio = wall / small_wall
        scale = large / count
        RESULTS["trees_large"] = {
            "title": f"Trees at scale: {large} files of 4 KiB, one push each (list/status: {REPEATS} runs; resume: 3 runs)",
            "header": ["measure", "value", "goal", "met"],
            "rows": [
                [f"wall time, {large} files", f"{wall:.1f} s ({large / wall:.0f} files/s)", "-", "-"],
                [f"ratio to the {count}-file push (x{scale:.0f} files)", f"{ratio:.1f}x", f"<= {1.1 * scale:.0f}x",
                 "yes" if ratio <= 1.1 * scale else "NO"],
                ["client CPU per file", f"{cpu * 1000 / large:.3f} ms", "-", "-"],
                ["receiver CPU per file", f"{receiver * 1000 / large:.3f} ms", "-", "-"],
                ["client peak RSS", f"{rss / MiB:.0f} MiB", "<= 128 MiB", "yes" if rss <= 128 * MiB else "NO"],
                ["state directory per file", f"{state_bytes / large:.0f} bytes", "<= 300", "yes" if state_bytes / large <= 300 else "NO"],
                ["`xfer list --all`", f"{median(list_times) * 1000:.0f} ms", "<= 300 ms", "yes" if median(list_times) <= 0.3 else "NO"],
                ["`xfer status JOB`", f"{median(status_times) * 1000:.0f} ms", "<= 300 ms", "yes" if median(status_times) <= 0.3 else "NO"],
                ["killed half way: spawn -> first chunk acknowledged", f"{median(resume_times) * 1000:.0f} ms",
                 "<= 1000 ms (first request)", "yes" if median(resume_times) <= 1.0 else "NO"],
            ],
        }
    finally:
        recv.stop()
        shutil.rmtree(small_tree, ignore_errors=True)
        shutil.rmtree(large_tree, ignore_errors=True)
        for old in roots:
            shutil.rmtree(old, ignore_errors=True)
