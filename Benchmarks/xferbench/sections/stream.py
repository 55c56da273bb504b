"""Streams (issue 18): `xfer push -` from a pipe against `aws s3 cp -` into moto."""

import os
import subprocess
import time
from ..common import MiB, ROUNDS, SIZES, log, median, XFER, make_random_file, parse_time_v, RESULTS, parse_cpu_v
from ..servers import S3_PYTHON, S3_ENV, Moto
from ..system import sh


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
    # At its defaults and with the part checksum aws-cli sends (a CRC declared at the upload's
    # creation): moto computes a checksum of the whole object when a multipart upload without a
    # declared algorithm completes (1 GiB in Python), which an algorithm named spares it.
    kinds = ["xfer", "xfer crc32c", "aws"]
    runs = {k: [] for k in kinds}  # (wall s, CPU s, peak RSS)
    for rnd in range(ROUNDS):
        for k in kinds:
            moto = Moto()
            key = f"stream-{k}-{rnd}.bin"
            env = dict(S3_ENV, AWS_CONFIG_FILE=aws_config)
            if k.startswith("xfer"):
                uploader = [XFER, "push", "-", "--name", key, "--backend", "s3", "--to", "s3://bench/", "--endpoint", moto.url,
                            "--state", work.fresh("state"), "--chunk-size", "8MiB"]
                if k == "xfer crc32c":
                    uploader += ["--part-checksum", "crc32c"]
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
           "xfer crc32c": "the same with `--part-checksum crc32c` (a CRC-32C per part, declared at the upload's creation)",
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
