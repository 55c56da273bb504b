"""A tus client for xfer's end-to-end tests that sends many appends quickly, over one kept-alive
connection (the Python standard library only), optionally with HEADs of the same upload sent
meanwhile on another connection: what a phone sending small pieces while it polls looks like.

  tusappends.py create BASE_URL LENGTH          creates an upload (POST BASE_URL/files/); prints its URL
  tusappends.py append UPLOAD_URL FILE PIECE [--upto BYTES] [--heads]
                                                appends FILE from the upload's offset (a HEAD tells
                                                it) up to BYTES (default: the whole file), PIECE
                                                bytes a PATCH; each must answer 204 with the
                                                offset it reached, else the script stops with exit
                                                status 1 and what it got. --heads: a second
                                                connection sends HEADs of the upload all along.
                                                Prints "offset N" and, with --heads, "heads N".
"""

import http.client
import sys
import threading
from urllib.parse import urlsplit

TUS = {"Tus-Resumable": "1.0.0"}


def connect(url):
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=120), parts.path


def head_offset(connection, path):
    connection.request("HEAD", path, headers=TUS)
    answer = connection.getresponse()
    answer.read()
    if answer.status != 200:
        raise SystemExit(f"HEAD answered {answer.status}")
    return int(answer.getheader("Upload-Offset"))


def create(base, length):
    connection, path = connect(base)
    connection.request("POST", path.rstrip("/") + "/files/", headers={**TUS, "Upload-Length": str(length)})
    answer = connection.getresponse()
    answer.read()
    if answer.status != 201:
        raise SystemExit(f"POST answered {answer.status}")
    print(answer.getheader("Location"), flush=True)


def append(url, file, piece, upto, heads):
    with open(file, "rb") as handle:
        data = handle.read()
    upto = len(data) if upto is None else upto
    connection, path = connect(url)
    offset = head_offset(connection, path)
    done = threading.Event()
    sent_heads = [0]
    failures = []

    def poll():
        poller, _ = connect(url)
        while not done.is_set():
            try:
                head_offset(poller, path)
                sent_heads[0] += 1
            except BaseException as error:  # reported below; the appends are the subject
                failures.append(f"HEAD: {error}")
                return

    poller = threading.Thread(target=poll) if heads else None
    if poller:
        poller.start()
    try:
        while offset < upto:
            body = data[offset:min(offset + piece, upto)]
            connection.request(
                "PATCH", path, body=body,
                headers={**TUS, "Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream"})
            answer = connection.getresponse()
            text = answer.read()
            reached = answer.getheader("Upload-Offset")
            if answer.status != 204 or reached != str(offset + len(body)):
                raise SystemExit(f"PATCH at {offset} answered {answer.status} Upload-Offset {reached}: {text[:300]!r}")
            offset += len(body)
    finally:
        done.set()
        if poller:
            poller.join()
    print(f"offset {offset}", flush=True)
    if heads:
        print(f"heads {sent_heads[0]}", flush=True)
    if failures:
        raise SystemExit(failures[0])


def main(arguments):
    if arguments[:1] == ["create"]:
        create(arguments[1], int(arguments[2]))
    elif arguments[:1] == ["append"]:
        upto = None
        if "--upto" in arguments:
            upto = int(arguments[arguments.index("--upto") + 1])
        append(arguments[1], arguments[2], int(arguments[3]), upto, "--heads" in arguments)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
