"""The goals registry: every goal an issue set, with the latest value measured for it.

After a section runs, `record` reads the tables it left in RESULTS and stores one record per goal:
its id, what it is (one line), the target, the measured value (text, the numbers of the section's
own table), met or not, and the run that measured it (the command and its start, UTC). At the end
of every run, full or ONLY=, report.write_goals puts all the records at the top of
Docs/benchmarks.md ("Where every goal stands").

Where the records live: Benchmarks/goals.json, committed with the code. Not a hidden comment in
Docs/benchmarks.md: the doc is also edited by hand, and a hidden block is easy to damage without
noticing, where a JSON file fails loudly when it is broken; a file of its own also shows in a
diff which goals a run moved, and is read by any tool without parsing Markdown. It survives
partial runs because a run replaces only the records of the goals it measured: a goal ONLY= did
not reach keeps its record, with its own older run and date. A section that fails records
nothing, so its last figures stay. To retire a goal, delete its record from the file.

The values come from the section's tables, not from a second copy of its numbers, so the goals
table always agrees with the tables below it. Where an issue set no number (S3 against aws-cli and
rclone, tus against tuspy, streams against aws-cli, ietf into Apple's server), the target is parity
with the reference client, and says so.

Also a command: `python3 Benchmarks/run.py --goals` rewrites the goals block from goals.json; with
`--from-doc` it first derives the records again from the generated blocks of Docs/benchmarks.md
(each table's "Generated/Measured ... by `COMMAND`" line gives the run; that is how the registry
was first seeded). Neither needs the binaries.
"""

import json
import os
import re
import sys

from .report import CORE_TABLES, RUN_LINE as STAMP, write_goals
from .system import REPO, DOC

GOALS_FILE = os.path.join(REPO, "Benchmarks", "goals.json")


# ---------------------------------------------------------------- reading a section's tables

class Table:
    """One table a section left in RESULTS ({"title", "header", "rows"}), or one read back from the doc."""

    def __init__(self, table):
        self.title = table["title"]
        self.header = [str(c).strip() for c in table["header"]]
        self.rows = [[str(c).strip() for c in row] for row in table["rows"]]

    def row(self, first, *more):
        """The row whose first cell is `first` (else the first that starts with it) and whose next cells are `more`."""
        fits = [r for r in self.rows if all(r[i + 1] == m for i, m in enumerate(more))]
        for r in [r for r in fits if r[0] == first] + [r for r in fits if r[0].startswith(first)]:
            return r
        raise KeyError(f"no row {first!r} {more} in {self.title!r}")

    def get(self, column, first, *more):
        return self.row(first, *more)[self.header.index(column)]

    def num(self, column, first, *more):
        return number(self.get(column, first, *more))

    def column(self, column):
        return [r[self.header.index(column)] for r in self.rows]


def number(text):
    m = re.search(r"-?\d+(?:\.\d+)?", str(text))
    if not m:
        raise ValueError(f"no number in {text!r}")
    return float(m.group(0))


def after_equals(text):
    """"0 parts = 0 MiB" -> 0.0; "16 × 8 MiB = 128 MiB" -> 128.0."""
    return number(str(text).split("=")[-1])


def yes(cell):
    return str(cell).strip().lower() == "yes"


def pretty(goal_text):
    return goal_text.replace(">= ", "≥ ").replace("<= ", "≤ ").replace("x curl", "× curl")


# ---------------------------------------------------------------- the goals, section by section

# (goal id, section, the RESULTS keys it reads, function(tables) -> (goal, target, measured, met)),
# in the order of the sections in main.PLAN: the goals table keeps this order.
RULES = []


def goal(goal_id, section, *tables):
    def add(function):
        RULES.append((goal_id, section, tables or (section,), function))
        return function
    return add


@goal("throughput", "throughput")
def _throughput(t):
    t = t["throughput"]
    kinds = ("patch", "multipart", "sequence")
    return ("Throughput (section 1): `xfer push` of 1 GiB, 8 MiB chunks, 4 in flight (sequence: one at a time), "
            "against one `curl -T` stream",
            "patch, multipart ≥ 0.9× curl; sequence ≥ 0.8×",
            ", ".join(f"{k} {t.get('ratio to curl', k)}×" for k in kinds) + f" (curl {t.get('median MiB/s', 'curl')} MiB/s)",
            all(yes(t.get("met", k)) for k in kinds))


@goal("memory", "memory")
def _memory(t):
    t = t["memory"]
    small, large = t.rows[0], t.rows[1]
    return ("Memory (section 2): peak RSS of `xfer push`, patch, 8 MiB × 4, a 64 MiB and a 4 GiB file",
            "< 64 MiB, the large file within 10 % of the small",
            f"{small[1]} and {large[1]} MiB ({t.get('ratio large/small', large[0])}×)",
            yes(t.get("met", small[0])) and yes(t.get("met", large[0])))


@goal("small", "small")
def _small(t):
    t = t["small"]
    return ("Small chunks (section 3): 256 MiB in 64 KiB chunks, patch, 8 in flight, against curl sending the same pieces",
            "≥ 3000 chunks/s, ≤ 150 µs client CPU a chunk and ≤ 1.2× curl -Z 8's a request",
            f"{t.get('median chunks/s', 'xfer push')} chunks/s, {t.get('client CPU µs/chunk', 'xfer push')} µs a chunk "
            f"({t.get('CPU ratio to curl' + chr(39) + 's a request', 'xfer push')}× curl's "
            f"{t.get('client CPU µs/chunk', 'curl -Z 8')} µs)",
            yes(t.get("met", "xfer push")))


@goal("resume", "resume")
def _resume(t):
    t = t["resume"]
    return ("Resume (section 4a): a half-done job of 1,048,576 chunks, spawn to the first chunk request",
            "≤ 300 ms",
            f"{t.get('median ms', 'spawn -> first chunk request')} ms",
            yes(t.get("met", "spawn -> first chunk request")))


@goal("list", "list")
def _list(t):
    t = t["list"]
    return ("List (section 4b): `xfer list` and `xfer list --all` with 10,000 jobs in the store",
            "≤ 300 ms each",
            " and ".join(f"{v} ms" for v in t.column("median ms")),
            all(yes(v) for v in t.column("met")))


@goal("resend", "resend")
def _resend(t):
    t = t["resend"]
    return ("Re-sent after SIGKILL (section 5): 256 MiB killed at half the chunks, then run to the end",
            "≤ what was in flight (patch, multipart 4 × 8 MiB; sequence 8 MiB), file byte-identical",
            ", ".join(f"{r[0]} {r[t.header.index('re-sent MiB')]} MiB" for r in t.rows) + "; identical: "
            + ("yes" if all(yes(v) for v in t.column("byte-identical (sha256)")) else "NO"),
            all(yes(v) for v in t.column("within")) and all(yes(v) for v in t.column("byte-identical (sha256)")))


@goal("s3", "s3")
def _s3(t):
    t = t["s3"]
    md5, crc, rclone = (t.num("xfer / client", "aws no checksum"), t.num("xfer crc32 / client", "aws"),
                        t.num("xfer / client", "rclone"))
    return ("S3 into moto (section 8): 1 GiB multipart, xfer against aws-cli with the same part checksum, and rclone",
            "≥ 1.0× each (parity: issue 8 set no number)",
            f"default (Content-MD5) {md5:.2f}× aws-cli with no part checksum; --part-checksum crc32 {crc:.2f}× aws-cli's "
            f"default (CRC32); {rclone:.2f}× rclone",
            min(md5, crc, rclone) >= 1.0)


@goal("tus", "tus")
def _tus(t):
    t = t["tus"]
    ordered, partial = t.num("ratio to tuspy --checksum", "xfer -c 1"), t.num("ratio to tuspy --checksum", "xfer")
    return ("tus into its server (section 9): 1 GiB into resumable-upload, 8 MiB chunks with sha1, against tuspy --checksum",
            "≥ 1.0× (parity: issue 9 set no number)",
            f"in order (-c 1) {ordered:.2f}×; 4 partial uploads, concatenated {partial:.2f}×",
            min(ordered, partial) >= 1.0)


@goal("trees.c8", "trees")
def _trees_c8(t):
    t = t["trees"]
    row = "xfer push DIR, patch, -c 8"
    return ("Trees: 10,000 files of 4 KiB, patch, 8 in flight",
            pretty(t.get("goal", row)),
            f"{t.get('files/s', row)} files/s, client {t.get('client CPU-ms/file', row)} and receiver "
            f"{t.get('receiver CPU-ms/file', row)} CPU-ms a file",
            yes(t.get("met", row)))


@goal("trees.patch", "trees")
def _trees_patch(t):
    t = t["trees"]
    row = "xfer push DIR, patch, its defaults"
    return ("Trees: 10,000 files of 4 KiB, patch at its defaults, against `curl --parallel-max 8`",
            pretty(t.get("goal", row)).replace("curl --parallel-max 8", "curl -Z 8"),
            f"{t.get('ratio to curl -Z 8', row)}× ({t.get('files/s', row)} files/s), client {t.get('client CPU-ms/file', row)} "
            "CPU-ms a file",
            yes(t.get("met", row)))


@goal("trees.ietf", "trees")
def _trees_ietf(t):
    t = t["trees"]
    row = "xfer push DIR, ietf, its defaults"
    return ("Trees: 10,000 files of 4 KiB, ietf at its defaults, against `curl --parallel-max 8`",
            pretty(t.get("goal", row)).replace("curl --parallel-max 8", "curl -Z 8"),
            f"{t.get('ratio to curl -Z 8', row)}× ({t.get('files/s', row)} files/s), client {t.get('client CPU-ms/file', row)} "
            "CPU-ms a file",
            yes(t.get("met", row)))


@goal("trees.scale", "trees", "trees_large")
def _trees_scale(t):
    t = t["trees_large"]
    return ("Trees at scale: 100,000 files in one push, wall time against the 10,000-file push",
            "≤ 11× (10× the files)",
            t.get("value", "ratio to the").replace("x", "×") + " (" + t.get("value", "wall time").replace(" (", ", ").rstrip(")")
            + ")",
            yes(t.get("met", "ratio to the")))


@goal("trees.bounds", "trees", "trees_large")
def _trees_bounds(t):
    t = t["trees_large"]
    rows = ("client peak RSS", "state directory per file", "`xfer list --all`", "`xfer status JOB`")
    return ("Trees at scale: 100,000 files: client peak RSS, state per file, `xfer list --all`, `xfer status`",
            "≤ 128 MiB, ≤ 300 bytes, ≤ 300 ms, ≤ 300 ms",
            ", ".join(t.get("value", r) for r in rows),
            all(yes(t.get("met", r)) for r in rows))


@goal("trees.resume", "trees", "trees_large")
def _trees_resume(t):
    t = t["trees_large"]
    return ("Trees at scale: 100,000 files killed half way, spawn to the first chunk acknowledged",
            "≤ 1000 ms",
            t.get("value", "killed half way"),
            yes(t.get("met", "killed half way")))


@goal("datapath.patch", "datapath")
def _datapath_patch(t):
    t = t["datapath"]
    return ("Data path: patch, 8 MiB × 4, CRC-32C (negotiated), 1 GiB against `curl -T`",
            "≥ 0.9× curl",
            f"{t.get('ratio to curl', 'patch crc32c')}× ({t.get('MiB/s', 'patch crc32c')} against "
            f"{t.get('MiB/s', 'curl')} MiB/s)",
            yes(t.get("met", "patch crc32c")))


@goal("datapath.defaults", "datapath")
def _datapath_defaults(t):
    t = t["datapath"]
    rows = [("patch", "patch defaults"), ("ietf", "ietf defaults"), ("tus", "tus defaults")]
    bounded = [("sequence", "sequence", "one stream of its blocks"), ("multipart", "multipart defaults", "its MD5 bound")]
    return ("Data path: every backend at its defaults (no flags), 1 GiB against `curl -T`, or against the bound its protocol sets",
            "≥ 0.9× curl each (sequence: one stream of its blocks; multipart: its MD5 bound)",
            ", ".join([f"{name} {t.get('ratio to curl', row)}×" for name, row in rows]
                      + [f"{name} {t.get('ratio to its bound', row)}× {what}" for name, row, what in bounded]),
            all(yes(t.get("met", row)) for _, row in rows) and all(yes(t.get("met", row)) for _, row, _ in bounded))


@goal("datapath.md5", "datapath", "datapath", "datapath_hash")
def _datapath_md5(t):
    t, h = t["datapath"], t["datapath_hash"]
    bound = h.get("CPU-s/GiB", "bound:")
    return ("Data path: Content-MD5 (patch through the digest proxy), client CPU per GiB",
            f"≤ 1.15 × (curl + MD5 + SHA-256), {bound} CPU-s/GiB in that run",
            f"{t.get('client CPU-s/GiB', 'patch md5 via proxy')} CPU-s/GiB",
            yes(t.get("met", "patch md5 via proxy")))


@goal("datapath.receiver", "datapath")
def _datapath_receiver(t):
    t = t["datapath"]
    raw, patch = t.num("receiver CPU-s/GiB", "curl"), t.num("receiver CPU-s/GiB", "patch crc32c")
    return ("Data path: receiver CPU per GiB, a raw PUT and patch with CRC-32C",
            "≤ 1.0 and ≤ 1.3 CPU-s/GiB",
            f"{raw:.2f} and {patch:.2f} CPU-s/GiB",
            raw <= 1.0 and patch <= 1.3)


@goal("datapath.rss", "datapath", "datapath_memory")
def _datapath_rss(t):
    t = t["datapath_memory"]
    peaks = [number(v) for v in t.column("median peak RSS MiB")]
    ratios = [v for v in t.column("ratio to the small file") if v != "-"]
    return ("Data path: client peak RSS, patch at 8 MiB × 4 and 64 MiB × 8, a file that fills the window (64 and 512 MiB) and a 4 GiB file",
            "≤ 48 MiB, the large file within 10 % of the small",
            f"{min(peaks):.1f}–{max(peaks):.1f} MiB; large ÷ small {', '.join(ratios)}",
            all(yes(v) for v in t.column("met")))


@goal("stream", "stream")
def _stream(t):
    t = t["stream"]
    return ("Streams (from a pipe): 1 GiB into moto, `xfer push -` against `aws s3 cp -`",
            "≥ 1.0× aws-cli (parity: issue 18 set no number)",
            f"{t.get('xfer / uploader', 'aws')}× ({t.get('median MiB/s', 'xfer')} against {t.get('median MiB/s', 'aws')} "
            f"MiB/s); peak RSS {t.get('median peak RSS MiB', 'xfer')} against {t.get('median peak RSS MiB', 'aws')} MiB"
            + (f"; with --part-checksum crc32c {t.get('median MiB/s', 'xfer crc32c')} MiB/s"
               if "xfer crc32c" in t.column("uploader") else ""),
            t.num("xfer / uploader", "aws") >= 1.0)


@goal("ceph.file", "ceph")
def _ceph_file(t):
    t = t["ceph"]
    return ("Ceph (section 10): 1 GiB into the RADOS Gateway, against s5cmd",
            "≥ 1.1× s5cmd",
            f"{t.get('÷ s5cmd', 'xfer')}× ({t.get('median MiB/s', 'xfer')} against {t.get('median MiB/s', 's5cmd')} MiB/s)",
            t.num("÷ s5cmd", "xfer") >= 1.1)


@goal("ceph.files", "ceph", "ceph_tree")
def _ceph_files(t):
    t = t["ceph_tree"]
    return ("Ceph: 10,000 files of 4 KiB into the gateway, against s5cmd",
            "≥ 1.0× s5cmd",
            f"{t.get('÷ s5cmd', 'xfer')}× ({t.get('median files/s', 'xfer')} against {t.get('median files/s', 's5cmd')} "
            "files/s)",
            t.num("÷ s5cmd", "xfer") >= 1.0)


@goal("ceph.kill", "ceph", "ceph_kill")
def _ceph_kill(t):
    t = t["ceph_kill"]
    row = t.rows[0]
    resent, bound = after_equals(row[t.header.index("re-sent")]), after_equals(row[t.header.index("bound (in flight × part)")])
    identical = yes(row[t.header.index("object byte-identical (SHA-256 of a download)")])
    return ("Ceph: kill -9 at half of the 1 GiB push, then the same command",
            "re-sent ≤ in flight (16 × 8 MiB), object byte-identical",
            f"{row[t.header.index('re-sent')]} re-sent; identical: {'yes' if identical else 'NO'}",
            resent <= bound and identical)


@goal("ietf.apple", "ietf")
def _ietf_apple(t):
    t = t["ietf"]
    return ("IETF: 1 GiB pushed with `--backend ietf` into Apple's NIOResumableUpload (interop 6)",
            "≥ 1.0× `curl -T` into xfer serve (parity: issue 20 set no number)",
            f"{t.get('speed vs curl', 'ietf -> Apple')}× ({t.get('median MiB/s', 'ietf -> Apple')} MiB/s; that server does "
            "not sync)",
            t.num("speed vs curl", "ietf -> Apple") >= 1.0)


OBJECT_STORE_ONE = "xfer → 1 × xfer serve --storage s3://"
OBJECT_STORE_TWO = "xfer → haproxy → 2 × xfer serve --storage s3://"


@goal("objectstore.file", "objectstore")
def _objectstore_file(t):
    t = t["objectstore"]
    return ("Object store (section 11): 1 GiB through `xfer serve --storage s3://` into Ceph (patch), against s5cmd "
            "straight to the gateway",
            "≥ 0.8×",
            f"{t.get('÷ s5cmd direct', OBJECT_STORE_ONE, 'patch')}×",
            t.num("÷ s5cmd direct", OBJECT_STORE_ONE, "patch") >= 0.8)


@goal("objectstore.ietf", "objectstore", "objectstore_tree")
def _objectstore_ietf(t):
    t = t["objectstore_tree"]
    return ("Object store: 10,000 files of 4 KiB through it with ietf, against s5cmd straight to the gateway",
            "≥ 0.6×",
            f"{t.get('÷ s5cmd direct', OBJECT_STORE_ONE, 'ietf')}× ({t.get('store requests per file', OBJECT_STORE_ONE, 'ietf')} "
            "store requests a file)",
            t.num("÷ s5cmd direct", OBJECT_STORE_ONE, "ietf") >= 0.6)


@goal("objectstore.patch", "objectstore", "objectstore_tree")
def _objectstore_patch(t):
    t = t["objectstore_tree"]
    return ("Object store: 10,000 files of 4 KiB through it with patch, against s5cmd straight to the gateway",
            "≥ 0.3×",
            f"{t.get('÷ s5cmd direct', OBJECT_STORE_ONE, 'patch')}× ({t.get('store requests per file', OBJECT_STORE_ONE, 'patch')} "
            "store requests a file)",
            t.num("÷ s5cmd direct", OBJECT_STORE_ONE, "patch") >= 0.3)


@goal("objectstore.two", "objectstore", "objectstore", "objectstore_tree")
def _objectstore_two(t):
    one, tree = t["objectstore"], t["objectstore_tree"]
    file_ratio = one.num("median MiB/s", OBJECT_STORE_TWO, "patch") / one.num("median MiB/s", OBJECT_STORE_ONE, "patch")
    tree_ratio = tree.num("median files/s", OBJECT_STORE_TWO, "ietf") / tree.num("median files/s", OBJECT_STORE_ONE, "ietf")
    return ("Object store: two instances behind haproxy against one",
            "≥ 0.9× one",
            f"{file_ratio:.2f}× (the file), {tree_ratio:.2f}× (the ietf tree)",
            min(file_ratio, tree_ratio) >= 0.9)


@goal("objectstore.rss", "objectstore", "objectstore_memory")
def _objectstore_rss(t):
    t = t["objectstore_memory"]
    rss = number(t.rows[0][t.header.index("receiver peak RSS MiB")])
    return ("Object store: receiver peak RSS with 64 chunks of 8 MiB in flight",
            "≤ 128 MiB",
            f"{rss:.0f} MiB",
            rss <= 128)


@goal("pull.aria2", "pull")
def _pull_aria2(t):
    t = t["pull"]
    return ("Downloads (section 12): 1 GiB from `xfer serve`, `xfer pull` at its defaults against `aria2c -x 16 -s 16`",
            "≥ 1.0× aria2c",
            f"{t.get('÷ aria2c', 'xfer defaults')}× ({t.get('median MiB/s', 'xfer defaults')} against "
            f"{t.get('median MiB/s', 'aria2c')} MiB/s)",
            t.num("÷ aria2c", "xfer defaults") >= 1.0)


@goal("pull.curl", "pull")
def _pull_curl(t):
    t = t["pull"]
    return ("Downloads: 1 GiB from `xfer serve`, `xfer pull` at its defaults against `curl -o`",
            "≥ 1.5× curl",
            f"{t.get('÷ curl', 'xfer defaults')}× ({t.get('median MiB/s', 'xfer defaults')} against "
            f"{t.get('median MiB/s', 'curl')} MiB/s)",
            t.num("÷ curl", "xfer defaults") >= 1.5)


@goal("pull.cpu", "pull")
def _pull_cpu(t):
    t = t["pull"]
    xfer, curl = t.num("CPU s per GiB", "xfer defaults"), t.num("CPU s per GiB", "curl")
    return ("Downloads: client CPU per GiB against curl's (the CRC-32C is combined from the ranges', no second pass)",
            "≤ 1.15 × curl's (+ the digest offered)",
            f"{xfer:.2f} against {curl:.2f} CPU-s ({xfer / curl:.2f}×)",
            xfer <= 1.15 * curl)


@goal("pull.rss", "pull")
def _pull_rss(t):
    t = t["pull"]
    rss = t.num("peak RSS MiB", "xfer 16x8MiB")
    return ("Downloads: peak RSS of `xfer pull` at 8 MiB × 16, from `xfer serve`",
            "≤ 48 MiB",
            f"{rss:.0f} MiB",
            rss <= 48)


@goal("pull.kill", "pull", "pull_kill")
def _pull_kill(t):
    t = t["pull_kill"]
    row = t.rows[0]
    again, bound = row[t.header.index("fetched again")], row[t.header.index("bound (in flight × range)")]
    identical = yes(row[t.header.index("file byte-identical")])
    return ("Downloads: kill -9 at half of the 1 GiB pull, then the same command",
            "fetched again ≤ in flight (8 × 8 MiB), file byte-identical",
            f"{again} fetched again; identical: {'yes' if identical else 'NO'}",
            after_equals(again) <= after_equals(bound) and identical)


@goal("pullceph.file", "pullceph")
def _pullceph_file(t):
    t = t["pullceph"]
    return ("Downloads from Ceph (section 13): one 1 GiB object, against s5cmd",
            "≥ 1.1× s5cmd",
            f"{t.get('÷ s5cmd', 'xfer')}× ({t.get('median MiB/s', 'xfer')} against {t.get('median MiB/s', 's5cmd')} MiB/s)",
            t.num("÷ s5cmd", "xfer") >= 1.1)


@goal("pullceph.files", "pullceph", "pullceph_tree")
def _pullceph_files(t):
    t = t["pullceph_tree"]
    return ("Downloads from Ceph: 10,000 objects of 4 KiB under a prefix, against s5cmd",
            "≥ 1.1× s5cmd",
            f"{t.get('÷ s5cmd', 'xfer')}× ({t.get('median files/s', 'xfer')} against {t.get('median files/s', 's5cmd')} "
            "files/s)",
            t.num("÷ s5cmd", "xfer") >= 1.1)


@goal("pullceph.rss", "pullceph")
def _pullceph_rss(t):
    t = t["pullceph"]
    rss = t.num("peak RSS MiB", "xfer")
    return ("Downloads from Ceph: peak RSS of `xfer pull` of the 1 GiB object (16 × 8 MiB)",
            "≤ 48 MiB",
            f"{rss:.0f} MiB",
            rss <= 48)


FAR_BACKENDS = ("patch", "multipart", "sequence", "tus", "ietf")


@goal("far.trees", "far")
def _far_trees(t):
    t = t["far"]
    rows = {k: f"xfer push DIR, {k}, its defaults" for k in FAR_BACKENDS}
    ratios = [t.num("ratio to curl -Z 16", row) for row in rows.values()]
    return ("Far (RTT 50 ms): 1,000 files of 4 KiB, every backend at its defaults",
            "≥ 1.0× `curl -Z 16`, and within 1.5× the round-trip floor",
            f"{min(ratios):.2f}–{max(ratios):.2f}× curl; × the floor: "
            + ", ".join(f"{k} {t.get('x the floor', row)}" for k, row in rows.items()),
            all(yes(t.get("met", row)) for row in rows.values()))


@goal("far.link", "far", "far_large")
def _far_link(t):
    t = t["far_large"]
    rows = {k: f"xfer push FILE, {k}, its defaults" for k in FAR_BACKENDS}
    return ("Far: one 1 GiB file through a 200 Mbit/s link at RTT 50 ms, every backend at its defaults",
            "≥ 0.9 of the link",
            ", ".join(f"{k} {t.get('x the link', row)}" for k, row in rows.items()),
            all(yes(t.get("met", row)) for row in rows.values()))


@goal("far.s3", "far", "far_ceph")
def _far_s3(t):
    t = t["far_ceph"]
    mine = [r for r in t.rows if r[1].startswith("xfer")]
    speed, ratio, met = t.header.index("speed"), t.header.index("ratio to s5cmd"), t.header.index("met")

    def share(r):
        """A rate-capped row's speed as a share of the link ("200 Mbit/s cap" in its job)."""
        cap = re.search(r"(\d+) Mbit/s", r[0])
        return f", {number(r[speed]) * 8 / number(cap.group(1)):.2f} of the link" if cap and "MB/s" in r[speed] else ""
    return ("Far: s3 backend into Ceph at RTT 50 ms, 1,000 files of 4 KiB and one 1 GiB file (200 Mbit/s), "
            "against s5cmd",
            "files ≥ 1.0× s5cmd; the large file ≥ 0.9 of the link",
            "; ".join(f"{r[speed]} ({r[ratio]}× s5cmd{share(r)})" for r in mine),
            bool(mine) and all(yes(r[met]) for r in mine))


@goal("hostile.rate", "hostile")
def _hostile_rate(t):
    t = t["hostile"]
    attacked = [row for row in t.rows if row[1] == "all three"]
    ratios = [(row[0], number(row[t.header.index("ratio to alone")])) for row in attacked]
    return ("A noisy neighbour (issue 42): legitimate pushes into one `xfer serve` while another client holds half-open "
            "connections and stalled bodies, after uploads declaring 16 MiB of 1-byte chunks",
            "≥ 0.8× the rate into a receiver nobody attacks",
            ", ".join(f"{name} {ratio:.2f}×" for name, ratio in ratios),
            min(ratio for _, ratio in ratios) >= 0.8)


@goal("hostile.rss", "hostile")
def _hostile_rss(t):
    t = t["hostile"]
    column = t.header.index("receiver peak RSS MiB")
    attacked = [number(row[column]) for row in t.rows if row[1] == "all three"]
    connections = [number(row[column]) for row in t.rows if row[1] == "connections"]
    return ("A noisy neighbour: the attacked receiver's peak RSS",
            "≤ 256 MiB",
            f"{max(attacked):.0f} MiB ({max(connections):.0f} MiB under the connections alone)",
            max(attacked) <= 256)

SYNC_PEERS = "`aws s3 sync`, `s5cmd sync` and `rclone sync` (each at its defaults and at 64 requests in flight)"


def _sync_ratio(t):
    """(xfer's time, the fastest peer, its time, its time ÷ xfer's) from a sync table's last row."""
    return (t.num("median s", "xfer"), t.get("how", "fastest peer"), t.num("median s", "fastest peer"),
            t.num("÷ xfer (s)", "fastest peer"))


@goal("sync.first", "sync")
def _sync_first(t):
    xfer, peer, theirs, ratio = _sync_ratio(t["sync"])
    return (f"Sync (issue 45): `xfer sync` of 10,000 files of 4 KiB into the Ceph gateway, a first sync, against {SYNC_PEERS}",
            "≥ 1.1× the fastest peer",
            f"{ratio:.2f}× {peer} ({xfer:.2f} against {theirs:.2f} s)",
            ratio >= 1.1)


@goal("sync.unchanged", "sync", "sync_unchanged")
def _sync_unchanged(t):
    xfer, peer, theirs, ratio = _sync_ratio(t["sync_unchanged"])
    return ("Sync: the same 10,000 files again, nothing changed",
            "≥ 2× the fastest peer",
            f"{ratio:.2f}× {peer} ({xfer:.2f} against {theirs:.2f} s)",
            ratio >= 2.0)


@goal("sync.changed", "sync", "sync_changed")
def _sync_changed(t):
    t = t["sync_changed"]
    xfer, peer, theirs, ratio = _sync_ratio(t)
    found = t.get("changed files found", "xfer")
    blind = [r[0] for r in t.rows if r[-1].startswith("cannot detect")]
    exact = bool(re.fullmatch(r"(\d+) of \1", found))
    # The scenario's xfer ran its first sync and the re-run at its defaults, then --checksum; the row
    # "xfer --checksum" ran --checksum every time (the objects then carry their CRC-32C).
    always = t.num("median s", "xfer --checksum")
    return ("Sync: 1 % of the files changed in place (same size, modification time kept), `--checksum`",
            "finds exactly those, ≥ 2× the fastest peer that finds them",
            f"xfer found {found}; {ratio:.2f}× {peer} ({xfer:.2f} against {theirs:.2f} s) after a first sync and a "
            f"re-run without --checksum; {theirs / always:.2f}× ({always:.2f} s) with --checksum on every run"
            + (f"; {', '.join(blind)} cannot detect them" if blind else ""),
            exact and ratio >= 2.0)


@goal("sync.rss", "sync", "sync_large")
def _sync_rss(t):
    t = t["sync_large"]
    first, again = t.num("client peak RSS MiB", "first sync"), t.num("client peak RSS MiB", "nothing changed")
    keys = re.search(r"Sync 4: ([\d,]+) files", t.title)
    return (f"Sync: {keys.group(1) if keys else '100,000'} keys, peak RSS of `xfer sync`, a first sync and a re-run with nothing changed",
            "≤ 128 MiB",
            f"{first:.0f} and {again:.0f} MiB",
            max(first, again) <= 128)


# ---------------------------------------------------------------- the registry

def order(record):
    ids = [rule[0] for rule in RULES]
    return ids.index(record["id"]) if record["id"] in ids else len(ids)


def load():
    if not os.path.exists(GOALS_FILE):
        return []
    with open(GOALS_FILE) as f:
        return json.load(f)["goals"]


def save(records):
    records = sorted(records, key=order)
    with open(GOALS_FILE, "w") as f:
        json.dump({"about": ("The goals table at the top of Docs/benchmarks.md: one record per goal, the latest "
                             "`make bench` run that measured it (Benchmarks/xferbench/goals.py writes it; "
                             "delete a record to retire its goal)."),
                   "goals": records}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return records


def evaluate(section, results, command, date, log=lambda *a: None):
    """The records of `section`'s goals from its tables in `results` (RESULTS, or tables read back from the
    doc); a goal whose tables are missing (the section failed before them) or cannot be read is left out."""
    records = []
    for goal_id, owner, keys, function in RULES:
        if owner != section or any(k not in results for k in keys):
            continue
        try:
            what, target, measured, met = function({k: Table(results[k]) for k in keys})
        except (KeyError, ValueError, IndexError, ZeroDivisionError) as error:
            log(f"  goal {goal_id}: not recorded ({error})")
            continue
        records.append({"id": goal_id, "section": section, "goal": what, "target": target, "measured": measured,
                        "met": bool(met), "command": command, "date": date})
    return records


def record(records, section, results, command, date, log=lambda *a: None):
    """`records` with `section`'s goals replaced by what this run measured (the others as they were)."""
    new = {r["id"]: r for r in evaluate(section, results, command, date, log)}
    kept = [new.pop(r["id"], r) for r in records]
    return kept + list(new.values())


# ---------------------------------------------------------------- the doc's generated blocks, read back

BLOCK = re.compile(r"<!-- BEGIN GENERATED(?: (\w+))? by Benchmarks/run\.py[^>]*-->\n(.*?)<!-- END GENERATED(?: \1)? -->", re.S)
# The main block's tables by the number in their titles (report.CORE_TABLES); a section's own block: its
# tables in the order the section adds them to RESULTS.
MAIN_TABLES = {number: key for key, number in CORE_TABLES.items()}
MORE_TABLES = {"trees": ["trees_large"], "datapath": ["datapath_hash", "datapath_memory"],
               "ceph": ["ceph_tree", "ceph_kill"], "objectstore": ["objectstore_tree", "objectstore_memory"],
               "pull": ["pull_kill"], "pullceph": ["pullceph_tree"], "far": ["far_large", "far_ceph", "far_http2"],
               "sync": ["sync_unchanged", "sync_changed", "sync_large"]}


def read_doc(text):
    """{section: (tables {key: {"title", "header", "rows"}}, command, date)} from the generated blocks."""
    sections = {}
    for m in BLOCK.finditer(text):
        name, body = m.group(1), m.group(2)
        if name == "goals":
            continue
        block_stamp = STAMP.search(body)
        tables, stamps, current = [], {}, None
        for line in body.splitlines():
            if line.startswith("### "):
                current = {"title": line[4:], "header": None, "rows": []}
                tables.append(current)
            elif current is not None and STAMP.match(line):
                stamps[id(current)] = STAMP.match(line)
            elif current is not None and line.startswith("|"):
                cells = [c.strip() for c in line.strip()[1:-1].split("|")]
                if current["header"] is None:
                    current["header"] = cells
                elif not set(line.strip()) <= set("|-: "):
                    current["rows"].append(cells)
        tables = [t for t in tables if t["header"]]
        if name is None:
            for t in tables:
                key = MAIN_TABLES.get(t["title"].split()[0])
                if key:
                    stamp = stamps.get(id(t), block_stamp)
                    entry = sections.setdefault(key, ({}, stamp.group(2), stamp.group(1)))
                    entry[0][key] = t
        elif tables and block_stamp:
            keys = [name] + MORE_TABLES.get(name, [])
            sections[name] = ({k: t for k, t in zip(keys, tables)}, block_stamp.group(2), block_stamp.group(1))
    return sections


def main(args):
    records = load()
    if "--from-doc" in args:
        for section, (tables, command, date) in read_doc(open(DOC).read()).items():
            records = record(records, section, tables, command, date, log=lambda *a: print(*a, file=sys.stderr))
    records = save(records)
    write_goals(records)
    print(f"{len(records)} goals, {sum(r['met'] for r in records)} met: {GOALS_FILE}, {DOC}")


if __name__ == "__main__":
    main(sys.argv[1:])
