"""`xfer sync DIR s3://BUCKET/PREFIX` (issue 45) against `aws s3 sync`, `s5cmd sync` and `rclone sync` on Ceph's
RADOS Gateway: a first sync of a tree of small files, a re-run with nothing changed, a re-run after 1 % of the files
changed in place (same size, modification time put back to the nanosecond), and xfer's memory at 100,000 keys.

A baseline that fails fast looks fast: every run's exit status is checked, and after every run the bucket is listed
and compared with the tree — the same keys, the same sizes, and every object's ETag (an MD5: each file is one
PutObject) equal to the MD5 of its file. Objects a run wrote are counted from the listing (a new ETag or LastModified).
A tool that does not find the changed files (no way to compare contents) is reported as such, with its time, and is
not a baseline for that ratio."""

import hashlib
import json
import os
import shutil
import subprocess
import time

from ..common import MiB, QUICK, ROUNDS, SIZES, log, median, XFER, make_tree, tree_files, parse_time_v, parse_cpu_v, RESULTS
from ..servers import S3_PYTHON, CEPH_ENV, S5CMD, Ceph, rclone_on_ceph
from ..system import sh

# The configurations measured, in the order of a round (rotated by one each round): each tool at its defaults, and
# the peers also at 64 requests in flight — what xfer keeps in flight for small files at its defaults.
CONFIGS = [
    ("xfer", "its defaults (64 small requests in flight)"),
    ("xfer --checksum", "its defaults, --checksum on every run"),
    ("aws", "its defaults (max_concurrent_requests 10)"),
    ("aws 64", "max_concurrent_requests = 64"),
    ("s5cmd", "its defaults (--numworkers 256)"),
    ("s5cmd 64", "--numworkers 64"),
    ("rclone", "its defaults (--transfers 4 --checkers 8)"),
    ("rclone 64", "--transfers 64 --checkers 64 --fast-list"),
]
PREFIX = "tree"

LIST_SCRIPT = """
import boto3, json, sys
from botocore.config import Config
s = boto3.client('s3', endpoint_url=sys.argv[1], config=Config(s3={'addressing_style': 'path'}, max_pool_connections=4))
out = {}
for page in s.get_paginator('list_objects_v2').paginate(Bucket=sys.argv[2], Prefix=sys.argv[3]):
    for o in page.get('Contents', []):
        out[o['Key']] = [o['Size'], o['ETag'].strip('"'), o['LastModified'].isoformat()]
json.dump(out, open(sys.argv[4], 'w'))
"""


def sync_args(kind, tree, bucket, url, work, state, checksum=False):
    """The command line and environment of one sync: `kind` from CONFIGS; checksum=True: decide by content where
    the tool can (xfer --checksum, rclone --checksum); aws and s5cmd have no such mode (their sync compares sizes and
    times only), so they run as before."""
    env = dict(CEPH_ENV)
    tool = kind.split()[0]
    wide = kind.endswith(" 64")
    if tool == "xfer":
        args = [XFER, "sync", tree, f"s3://{bucket}/{PREFIX}", "--endpoint", url, "--state", state, "--progress", "none",
                "--json"]
        args += ["--checksum"] if checksum or kind == "xfer --checksum" else []
    elif tool == "aws":
        config = work.path(f"aws-config-sync{'-64' if wide else ''}")
        with open(config, "w") as out:
            out.write("[default]\nregion = us-east-1\n" + ("s3 =\n  max_concurrent_requests = 64\n" if wide else ""))
        env["AWS_CONFIG_FILE"] = config
        args = [S3_PYTHON, "-m", "awscli", "s3", "sync", tree, f"s3://{bucket}/{PREFIX}", "--endpoint-url", url,
                "--only-show-errors"]
    elif tool == "s5cmd":
        args = [S5CMD, "--endpoint-url", url] + (["--numworkers", "64"] if wide else []) + [
            "sync", tree.rstrip("/") + "/", f"s3://{bucket}/{PREFIX}/"]
    else:
        rclone_on_ceph(env, url)
        args = ["rclone", "sync", tree, f":s3:{bucket}/{PREFIX}"]
        args += ["--transfers", "64", "--checkers", "64", "--fast-list"] if wide else []
        args += ["--checksum"] if checksum else []
    return args, env


def run(args, env, work, label, ceph):
    """Runs one sync under /usr/bin/time -v: {wall, cpu (user + sys of the process and what it waited for), gateway
    (the gateway's and the OSD's CPU), rss, stdout}. A non-zero exit fails the section: its number would be void."""
    tv, out_path, err_path = (work.path(f"{label}.{ext}") for ext in ("time", "out", "err"))
    before = ceph.cpu()
    start = time.monotonic()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        code = subprocess.run(["/usr/bin/time", "-v", "-o", tv, *args], stdout=out, stderr=err, env=env,
                              timeout=3600).returncode
    wall = time.monotonic() - start
    gateway = ceph.cpu() - before
    rss, _ = parse_time_v(tv)
    if code != 0:
        raise RuntimeError(f"{label}: {' '.join(args[:3])}... exited {code}: {open(err_path).read().strip()[-400:]}")
    return {"wall": wall, "cpu": parse_cpu_v(tv), "gateway": gateway, "rss": rss, "stdout": open(out_path).read()}


def listing(ceph, bucket, work):
    """{key: [size, etag, last modified]} of everything under the prefix."""
    path = work.path(f"listing-{bucket}.json")
    out = subprocess.run([S3_PYTHON, "-c", LIST_SCRIPT, ceph.url, bucket, PREFIX + "/", path], env=CEPH_ENV,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"listing {bucket} failed: {out.stderr.strip()[-300:]}")
    with open(path) as f:
        return json.load(f)


def local_md5s(tree):
    """{key: (size, MD5 hex)} of the tree as the bucket should hold it."""
    result = {}
    for path, rel in tree_files(tree):
        with open(path, "rb") as f:
            data = f.read()
        result[f"{PREFIX}/{rel}"] = (len(data), hashlib.md5(data).hexdigest())
    return result


def check(label, objects, expected, before=None, changed=()):
    """Compares the bucket with the tree: the same keys and sizes, and each object's ETag the MD5 of its file, except
    the changed files, which a tool may have failed to find. Returns (written, changed found): the objects this run
    wrote (new, or a new ETag or time since `before`) and how many of `changed` now hold the file's new bytes."""
    if set(objects) != set(expected):
        missing, extra = set(expected) - set(objects), set(objects) - set(expected)
        raise RuntimeError(f"{label}: the bucket holds {len(objects)} keys for {len(expected)} files "
                           f"({len(missing)} missing, e.g. {sorted(missing)[:2]}; {len(extra)} extra, e.g. {sorted(extra)[:2]})")
    changed = set(changed)
    for key, (size, md5) in expected.items():
        if objects[key][0] != size:
            raise RuntimeError(f"{label}: {key} is {objects[key][0]} bytes, its file {size}")
        if objects[key][1] != md5 and key not in changed:
            raise RuntimeError(f"{label}: {key}'s ETag {objects[key][1]} is not its file's MD5 {md5}")
    found = sum(1 for key in changed if objects[key][1] == expected[key][1])
    if before is None:
        written = len(objects)
    else:
        written = sum(1 for key, o in objects.items() if before.get(key) != o)
    return written, found


def change_in_place(path):
    """New bytes of the same length (all but the first 8, the file's number), then the modification time put back to
    the nanosecond, as `touch -r` does (utimensat): only the contents tell the file changed."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(os.urandom(st.st_size - 8))
        f.flush()
        os.fsync(f.fileno())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    if after.st_size != st.st_size or after.st_mtime_ns != st.st_mtime_ns:
        raise RuntimeError(f"{path}: size or modification time did not stay")


def bench_sync(work):
    for tool in ("rclone", S5CMD, S3_PYTHON):
        if not shutil.which(tool):
            raise RuntimeError(f"{tool} is missing (make bench installs it)")
    files, large = SIZES["sync_files"], SIZES["sync_large"]
    if files % 100:
        raise RuntimeError(f"{files} files: the tree needs a multiple of 100 (1 % changed, one in each directory)")
    n = files // 100
    kinds = [k for k, _ in CONFIGS]
    how = dict(CONFIGS)
    ceph = Ceph(work.path("ceph-sync"))
    try:
        tree = work.path("sync-tree")
        make_tree(tree, files)
        keys = [f"{PREFIX}/{rel}" for _, rel in tree_files(tree)]
        scenarios = ("first", "unchanged", "changed")
        results = {s: {k: [] for k in kinds} for s in scenarios}
        written = {s: {k: [] for k in kinds} for s in scenarios}
        found = {k: [] for k in kinds}
        described = {s: [] for s in scenarios}
        for rnd in range(ROUNDS):
            order = kinds[rnd % len(kinds):] + kinds[:rnd % len(kinds)]
            buckets = {k: ceph.bucket() for k in kinds}
            states = {k: work.fresh("state-sync") for k in kinds}
            expected = local_md5s(tree)
            seen = {}
            for scenario in scenarios:
                changed = []
                if scenario == "changed":
                    # 1 % of the files, one in each directory of 100, a different one each round.
                    changed = [keys[i] for i in range((rnd * 37 + 13) % 100, files, 100)]
                    for key in changed:
                        change_in_place(os.path.join(tree, key[len(PREFIX) + 1:]))
                    expected = local_md5s(tree)
                for k in order:
                    args, env = sync_args(k, tree, buckets[k], ceph.url, work, states[k], checksum=scenario == "changed")
                    m = run(args, env, work, f"sync-{scenario}-{k.replace(' ', '')}-{rnd}", ceph)
                    objects = listing(ceph, buckets[k], work)
                    w, f = check(f"{k} ({scenario}, round {rnd + 1})", objects, expected, seen.get(k), changed)
                    seen[k] = objects
                    results[scenario][k].append(m)
                    written[scenario][k].append(w)
                    if scenario == "changed":
                        found[k].append(f)
                    if k.startswith("xfer"):
                        events = [json.loads(line) for line in m["stdout"].splitlines() if line.startswith("{")]
                        planned = next(e for e in events if e.get("event") == "planned")
                        synced = next(e for e in events if e.get("event") == "synced")
                        described[scenario].append((k, planned["described"]))
                        expected_copies = {"first": files, "unchanged": 0, "changed": len(changed)}[scenario]
                        if synced["copies"] != expected_copies or w != expected_copies:
                            raise RuntimeError(f"{k} ({scenario}, round {rnd + 1}) copied {synced['copies']} and wrote {w} "
                                               f"objects, expected {expected_copies}")
                    log(f"  sync {scenario} round {rnd + 1} {k}: {m['wall']:.2f} s, CPU {m['cpu']:.2f} s, gateway "
                        f"{m['gateway']:.2f} s, RSS {m['rss'] / MiB:.0f} MiB, wrote {w}"
                        + (f", found {f} of {len(changed)} changed" if scenario == "changed" else ""))
            for k in kinds:
                ceph.empty(buckets[k])

        versions = {"xfer": "this build",
                    "aws": "aws-cli " + sh(f"{S3_PYTHON} -c 'import awscli;print(awscli.__version__)'"),
                    "s5cmd": "s5cmd " + sh(f"{S5CMD} version").split("-")[0],
                    "rclone": sh("rclone version | head -1").replace("rclone ", "")}

        def rows(scenario, valid):
            walls = {k: median([m["wall"] for m in results[scenario][k]]) for k in kinds}
            peers = [k for k in kinds if not k.startswith("xfer") and valid(k)]
            fastest = min(peers, key=lambda k: walls[k]) if peers else None
            out = []
            for k in kinds:
                ms = results[scenario][k]
                flags = how[k] + (" --checksum" if scenario == "changed" and k in ("xfer", "rclone", "rclone 64") else "")
                heads = [d for name, d in described[scenario] if name == k]
                if heads:
                    flags += f"; HEAD requests while planning: {' '.join(str(d) for d in heads)}"
                row = [k, f"{versions[k.split()[0]]}, {flags}", f"{walls[k]:.2f}", " ".join(f"{m['wall']:.2f}" for m in ms),
                       f"{files / walls[k]:.0f}",
                       "-" if k == "xfer" else (f"{walls[k] / walls['xfer']:.2f}" if valid(k) else "not a baseline"),
                       f"{median([m['cpu'] for m in ms]):.2f}", f"{median([m['gateway'] for m in ms]):.2f}",
                       f"{median([m['rss'] for m in ms]) / MiB:.0f}", " ".join(str(w) for w in written[scenario][k])]
                if scenario == "changed":
                    got = found[k]
                    row.append(f"{min(got)} of {n}" if min(got) == n and max(written[scenario][k]) == n
                               else f"cannot detect (copied {max(got)} of {n})" if max(got) < n
                               else f"{min(got)} of {n}, wrote {max(written[scenario][k])}")
                out.append(row)
            ratio = walls[fastest] / walls["xfer"] if fastest else float("nan")
            out.append(["fastest peer", fastest or "none", f"{walls[fastest]:.2f}" if fastest else "-", "-", "-",
                        f"{ratio:.2f}", "-", "-", "-", "-"] + (["-"] if scenario == "changed" else []))
            return out

        header = ["client", "how", "median s", "runs s", "files/s", "÷ xfer (s)", "client CPU s", "gateway+OSD CPU s",
                  "client peak RSS MiB", "objects written (each round)"]
        ceph_version = sh("ceph --version").split(" (")[0]
        RESULTS["sync"] = {
            "title": (f"Sync 1: first sync of {files:,} files of 4 KiB (100 to a directory) into {ceph_version}'s RADOS "
                      f"Gateway on 127.0.0.1, a fresh bucket per tool and round, {ROUNDS} alternating rounds (medians); "
                      "\"÷ xfer\" is the tool's time over xfer's; every run's exit status checked and the bucket listed "
                      "after it: the same keys and sizes, every ETag the MD5 of its file"),
            "header": header, "rows": rows("first", lambda k: True),
        }
        RESULTS["sync_unchanged"] = {
            "title": (f"Sync 2: the same command again, nothing changed ({files:,} files, the same buckets; xfer with the "
                      "state directory of its first sync, as a user has it); objects written counted from the listing"),
            "header": header, "rows": rows("unchanged", lambda k: True),
        }
        RESULTS["sync_changed"] = {
            "title": (f"Sync 3: {n} files ({n * 100 // files} %) changed in place, same size, modification time put back to "
                      "the nanosecond; xfer and rclone with --checksum, aws and s5cmd as before (neither has a mode that "
                      "compares contents); a tool that did not copy all of them is not a baseline"),
            "header": header + ["changed files found"],
            "rows": rows("changed", lambda k: min(found[k]) == n and max(written["changed"][k]) == n),
        }
        log(f"  xfer's descriptions (HEAD requests) while planning: {described}")
        shutil.rmtree(tree)

        # 100,000 keys: xfer's memory, a first sync and the same command with nothing changed.
        big = work.path("sync-large")
        make_tree(big, large)
        expected = local_md5s(big)
        bucket = ceph.bucket()
        state = work.fresh("state-sync-large")
        rows_large = []
        seen = None
        for scenario in ("first sync", "nothing changed"):
            args, env = sync_args("xfer", big, bucket, ceph.url, work, state)
            m = run(args, env, work, f"sync-large-{scenario.replace(' ', '-')}", ceph)
            objects = listing(ceph, bucket, work)
            w, _ = check(f"xfer {large} keys ({scenario})", objects, expected, seen)
            seen = objects
            expected_writes = large if scenario == "first sync" else 0
            if w != expected_writes:
                raise RuntimeError(f"xfer {large} keys ({scenario}) wrote {w} objects, expected {expected_writes}")
            rss = m["rss"] / MiB
            rows_large.append([scenario, f"{m['wall']:.1f}", f"{large / m['wall']:.0f}", f"{m['cpu']:.1f}",
                               f"{m['gateway']:.1f}", f"{rss:.0f}", str(w), "≤ 128 MiB", "yes" if rss <= 128 else "NO"])
            log(f"  sync {large} keys {scenario}: {m['wall']:.1f} s, CPU {m['cpu']:.1f} s, RSS {rss:.0f} MiB, wrote {w}")
        RESULTS["sync_large"] = {
            "title": (f"Sync 4: {large:,} files of 4 KiB (100 to a directory), `xfer sync` at its defaults, one run each; "
                      "the bucket listed and compared after each"),
            "header": ["run", "wall s", "files/s", "client CPU s", "gateway+OSD CPU s", "client peak RSS MiB",
                       "objects written", "goal", "met"],
            "rows": rows_large,
        }
        ceph.empty(bucket)
        shutil.rmtree(big)
    finally:
        ceph.stop()
