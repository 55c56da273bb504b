"""What every section shares: the environment (QUICK, ROUNDS, ONLY, sizes), the binaries, logging,
medians, timing under /usr/bin/time and its parsing, the work directory, and RESULTS, the tables
each section fills for the report."""

import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from .system import REPO


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
    "sync_files": 1_000 if QUICK else 10_000,
    "sync_large": 20_000 if QUICK else 100_000,
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


def read_events(proc, sink):
    for raw in iter(proc.stdout.readline, b""):
        line = raw.decode(errors="replace").strip()
        try:
            sink.put((time.monotonic(), json.loads(line)))
        except ValueError:
            pass
    # The process ended: a waiter must not wait for an event that cannot come.
    sink.put((time.monotonic(), {"event": "eof"}))


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



RESULTS = {}
