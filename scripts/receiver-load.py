#!/usr/bin/env python3
"""Small-file load on a running `xfer serve`, and the receiver's CPU per file.

    receiver-load.py URL PID [--files 5000] [--size 4096] [--clients 8] [--mode patch|raw] [--nested]

Each of --clients threads holds one keep-alive connection and sends its share of
--files files of --size bytes: patch (POST /uploads, one PATCH chunk, POST
complete; with --nested each file is named d<k>/file <n>.bin, a relative path, so its
publication makes one directory more) or raw (one PUT /raw/NAME). The receiver's CPU (utime + stime of PID,
from /proc) is read before and after; prints files/s and CPU-ms per file.
"""
import argparse
import hashlib
import base64
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("pid", type=int)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--mode", choices=["patch", "raw"], default="patch")
    parser.add_argument("--nested", action="store_true")
    parser.add_argument("--phases", action="store_true",
                        help="patch: all creations, then all chunks, then all completions, CPU for each")
    args = parser.parse_args()

    target = urllib.parse.urlparse(args.url)
    body = os.urandom(args.size)
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    errors = []

    def client(index):
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
        try:
            for n in range(index, args.files, args.clients):
                name = f"d{n % 10}/file {n}.bin" if args.nested else f"file {n}.bin"
                if args.mode == "raw":
                    connection.request("PUT", f"/raw/file{n}.bin", body=body)
                    answer = connection.getresponse()
                    answer.read()
                    if answer.status != 201:
                        raise RuntimeError(f"PUT {answer.status}")
                    continue
                create = json.dumps({"fileName": name, "size": args.size, "chunkSize": args.size})
                connection.request("POST", "/uploads", body=create, headers={"Content-Type": "application/json"})
                answer = connection.getresponse()
                data = answer.read()
                if answer.status != 201:
                    raise RuntimeError(f"create {answer.status} {data!r}")
                upload = json.loads(data)["uploadId"]
                connection.request(
                    "PATCH", f"/uploads/{upload}/chunks/1", body=body,
                    headers={"Content-Type": "application/octet-stream",
                             "Content-Range": f"bytes 0-{args.size - 1}/{args.size}", "Content-MD5": md5})
                answer = connection.getresponse()
                answer.read()
                if answer.status != 204:
                    raise RuntimeError(f"PATCH {answer.status}")
                connection.request("POST", f"/uploads/{upload}/complete")
                answer = connection.getresponse()
                data = answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"complete {answer.status} {data!r}")
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    def sync_rounds():
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
        connection.request("GET", "/stats")
        stats = json.loads(connection.getresponse().read())
        connection.close()
        return stats.get("syncRounds", 0)

    if args.phases:
        run_phases(args, target, body, md5, cpu_seconds, sync_rounds)
        return

    rounds_before = sync_rounds()
    before = cpu_seconds(args.pid)
    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    used = cpu_seconds(args.pid) - before
    rounds = sync_rounds() - rounds_before
    if errors:
        print(f"errors: {errors[:3]}", file=sys.stderr)
        sys.exit(1)
    print(f"{args.mode}{' nested' if args.nested else ''}: {args.files} files of {args.size} B, {args.clients} clients: "
          f"{elapsed:.2f} s ({args.files / elapsed:.0f} files/s), receiver {used:.2f} CPU-s, "
          f"{used * 1000 / args.files:.3f} CPU-ms per file, {rounds / args.files:.2f} sync rounds per file")


def run_phases(args, target, body, md5, cpu_seconds, sync_rounds):
    ids = [None] * args.files

    def step(kind, index):
        def client(i):
            connection = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
            for n in range(i, args.files, args.clients):
                if kind == "create":
                    connection.request("POST", "/uploads", body=json.dumps(
                        {"fileName": f"file {n}.bin", "size": args.size, "chunkSize": args.size}),
                        headers={"Content-Type": "application/json"})
                    ids[n] = json.loads(connection.getresponse().read())["uploadId"]
                elif kind == "chunk":
                    connection.request("PATCH", f"/uploads/{ids[n]}/chunks/1", body=body, headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Range": f"bytes 0-{args.size - 1}/{args.size}", "Content-MD5": md5})
                    answer = connection.getresponse()
                    answer.read()
                    assert answer.status == 204, answer.status
                else:
                    connection.request("POST", f"/uploads/{ids[n]}/complete")
                    answer = connection.getresponse()
                    answer.read()
                    assert answer.status == 200, answer.status
            connection.close()
        rounds = sync_rounds()
        before = cpu_seconds(args.pid)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        used = cpu_seconds(args.pid) - before
        print(f"  {kind}: {used * 1000 / args.files:.3f} CPU-ms each, {(sync_rounds() - rounds) / args.files:.2f} sync rounds each")

    print(f"patch phases: {args.files} files of {args.size} B, {args.clients} clients")
    for kind in ["create", "chunk", "complete"]:
        step(kind, 0)


if __name__ == "__main__":
    main()
