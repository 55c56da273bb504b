"""The installed binary (issue 44): for each binary named in BINARIES (`label=path,...`; default the
release build's `xfer`), its size stripped, what it loads, and what running it costs — `xfer --version`,
`xfer serve` up to its first line, a push of one file and of a tree of small files to a `xfer serve` of
the same binary — measured in alternating rounds, so that a static and a dynamic build (or -O and
-Osize) are compared side by side in one run. Every push proves it did the work: its completed
event names every file, and the receiver counted every byte."""

import os
import re
import shutil
import subprocess
import time
from ..common import BIN, MiB, QUICK, ROUNDS, RESULTS, SIZES, log, median, make_random_file, make_tree, parse_time_v, \
    parse_cpu_v, cpu_seconds, completed_event


def binaries():
    spec = os.environ.get("BINARIES")
    if not spec:
        return [("release", os.path.join(BIN, "xfer"))]
    pairs = []
    for item in spec.split(","):
        label, path = item.split("=", 1)
        pairs.append((label.strip(), os.path.abspath(path.strip())))
    return pairs


def toolchain():
    swift = shutil.which("swift")
    return os.path.dirname(os.path.dirname(os.path.realpath(swift))) if swift else None


def stripped_size(path, work):
    copy = work.path("stripped-" + str(abs(hash(path))))
    shutil.copyfile(path, copy)
    subprocess.run(["strip", "--strip-unneeded", copy], check=True)
    size = os.path.getsize(copy)
    os.unlink(copy)
    return size


def loads(path):
    """(libraries ldd lists, how many of them are under the Swift toolchain)."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    libs = [line.split()[0] for line in out.splitlines() if "=>" in line or line.strip().startswith("/")]
    top = toolchain()
    under = [line for line in out.splitlines() if top and top in line]
    return len(libs), len(under)


def run_v(args, work, label):
    """args under /usr/bin/time -v: (wall s, CPU s, peak RSS bytes, stdout); fails on a non-zero exit."""
    tv = work.path(f"time-{label}-{work.n}.txt")
    work.n += 1
    start = time.monotonic()
    out = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], capture_output=True, text=True)
    wall = time.monotonic() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])}... exited {out.returncode}: {out.stderr.strip()[-300:]}")
    rss, _ = parse_time_v(tv)
    return wall, parse_cpu_v(tv), rss, out.stdout


def high_water(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


class Serve:
    """`xfer serve` of one binary, timed up to its `listening on` line."""

    def __init__(self, binary, root):
        os.makedirs(root, exist_ok=True)
        start = time.monotonic()
        self.proc = subprocess.Popen([binary, "serve", "--root", root, "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        first = self.proc.stdout.readline().decode()
        self.startup = time.monotonic() - start
        m = re.search(r"listening on (http://\S+)", first)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"{binary} serve did not start: {first!r}")
        self.url = m.group(1)
        self.idle_rss = high_water(self.proc.pid)

    def received(self):
        import json, urllib.request
        with urllib.request.urlopen(self.url + "/stats", timeout=30) as r:
            return json.load(r)["payloadBytesReceived"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def bench_binary(work):
    pairs = binaries()
    size = 128 * MiB if QUICK else 1024 * MiB
    files = 500 if QUICK else 2000
    big = work.path("binary-big.bin")
    make_random_file(big, size)
    tree = work.path("binary-tree")
    if not os.path.isdir(tree):
        make_tree(tree, files)
    runs = {label: {"version": [], "version_rss": [], "serve": [], "serve_rss": [], "push": [], "tree": []} for label, _ in pairs}
    for rnd in range(ROUNDS):
        for label, binary in pairs:
            r = runs[label]
            # Startup: the median of several `--help`s (0.3.0 has no `--version`).
            walls = []
            for _ in range(10):
                wall, _, rss, out = run_v([binary, "--help"], work, "version")
                if not out.strip():
                    raise RuntimeError(f"{label}: --help printed nothing")
                walls.append(wall)
            r["version"].append(median(walls))
            r["version_rss"].append(rss)
            # One file, then a tree, each to a receiver of the same binary. The previous round's
            # gigabyte is written back first, so that no binary pays for another's dirty pages.
            for old in os.listdir(work.dir):
                if old.startswith("binary-root-") or old.startswith("binary-state-"):
                    shutil.rmtree(work.path(old), ignore_errors=True)
            os.sync()
            serve = Serve(binary, work.fresh("binary-root"))
            try:
                r["serve"].append(serve.startup)
                r["serve_rss"].append(serve.idle_rss)
                before = cpu_seconds(serve.proc.pid)
                wall, cpu, rss, out = run_v([binary, "push", big, "--backend", "patch", "--to", serve.url, "--state",
                                             work.fresh("binary-state"), "--json"], work, "push")
                completed_event(out)
                if serve.received() < size:
                    raise RuntimeError(f"{label}: the receiver counted {serve.received()} bytes of {size}")
                r["push"].append((wall, cpu, cpu_seconds(serve.proc.pid) - before, rss, high_water(serve.proc.pid)))
                os.sync()
                before = cpu_seconds(serve.proc.pid)
                wall, cpu, rss, out = run_v([binary, "push", tree, "--backend", "patch", "--to", serve.url, "--state",
                                             work.fresh("binary-state"), "--json"], work, "tree")
                if len(completed_event(out)["files"]) != files:
                    raise RuntimeError(f"{label}: the tree push reported {len(completed_event(out)['files'])} files of {files}")
                r["tree"].append((wall, cpu, cpu_seconds(serve.proc.pid) - before, rss))
            finally:
                serve.stop()
            log(f"  binary round {rnd + 1} {label}: --help {r['version'][-1] * 1000:.1f} ms, serve up in "
                f"{r['serve'][-1] * 1000:.0f} ms, push {size / MiB / r['push'][-1][0]:.0f} MiB/s, "
                f"tree {files / r['tree'][-1][0]:.0f} files/s")
    first = pairs[0][0]
    rows = []
    for label, binary in pairs:
        r = runs[label]
        count, under = loads(binary)
        push_wall = median([p[0] for p in r["push"]])
        tree_wall = median([t[0] for t in r["tree"]])
        base_push = median([p[0] for p in runs[first]["push"]])
        base_tree = median([t[0] for t in runs[first]["tree"]])
        rows.append([
            label, f"{stripped_size(binary, work) / MiB:.1f}", f"{count} ({under} of the toolchain)",
            f"{median(r['version']) * 1000:.1f} ms, {median(r['version_rss']) / MiB:.0f} MiB",
            f"{median(r['serve']) * 1000:.0f} ms, {median(r['serve_rss']) / MiB:.0f} MiB",
            f"{size / MiB / push_wall:.0f} MiB/s ({base_push / push_wall:.2f}x)",
            f"{median([p[1] for p in r['push']]):.2f} + {median([p[2] for p in r['push']]):.2f}",
            f"{median([p[3] for p in r['push']]) / MiB:.0f} / {median([p[4] for p in r['push']]) / MiB:.0f}",
            f"{files / tree_wall:.0f} files/s ({base_tree / tree_wall:.2f}x)",
            f"{median([t[1] for t in r['tree']]) * 1000 / files:.2f} + {median([t[2] for t in r['tree']]) * 1000 / files:.2f}",
        ])
    RESULTS["binary"] = {
        "title": (f"The installed binary: each stripped; `xfer --help` (median of 10; 0.3.0 has no `--version`) and `xfer serve` up to its first line; "
                  f"a push of {size // MiB} MiB and of {files} files of 4 KiB (patch, the defaults) to a `xfer serve` of the "
                  f"same binary; {ROUNDS} alternating rounds, medians; ratios to the first row"),
        "header": ["binary", "MiB stripped", "libraries loaded", "--help: wall, peak RSS", "serve: up in, RSS",
                   "push 1 file", "push CPU s (client + receiver)", "peak RSS MiB (client / receiver)", "push tree",
                   "tree CPU-ms/file (client + receiver)"],
        "rows": rows,
    }
