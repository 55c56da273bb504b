"""S3 multipart into moto (issue 8): xfer against aws-cli and rclone."""

import os
import shutil
import subprocess
import time
from ..common import MiB, ROUNDS, SIZES, log, median, XFER, make_random_file, parse_time_v, RESULTS
from ..servers import S3_PYTHON, S3_ENV, Moto
from ..system import sh


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
