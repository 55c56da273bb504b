#!/usr/bin/env python3
"""Clients that hold a receiver's connections without finishing what they send: half-open requests
(half a head), idle keep-alive connections, stalled bodies, and uploads declaring far more than they
send. For SlowClientTests (`make test`) and the bench's hostile-neighbour section: each subcommand
measures what the receiver did to its connections and prints one JSON line. Python 3 standard
library only, epoll for thousands of sockets.

  half-open PORT COUNT WAIT [PID] COUNT connections each send half a request head; /health is asked
                                  meanwhile (once the receiver, process PID, holds them all: its
                                  descriptors stop growing); then waits (at most WAIT s) for the
                                  receiver to close them
  silent PORT COUNT WAIT          COUNT connections that send nothing at all (a TLS handshake never
                                  begun); waits (at most WAIT s) for the receiver to close them
  idle PORT COUNT WAIT            COUNT connections each get one answer (GET /health, keep-alive),
                                  then send nothing; waits for the receiver to close them
  stall PORT METHOD PATH FROM LENGTH SENT WAIT [HEADER ...]
                                  one request of Content-Length LENGTH sends its head and SENT bytes
                                  of body (those at offset FROM of a file whose byte i is i mod 251),
                                  prints {"stalled": ...} once they are sent, then waits (at most
                                  WAIT s) for the receiver to close the connection
  stall-many PORT COUNT METHOD PATH LENGTH SENT WAIT [HEADER ...]
                                  `stall`'s request on COUNT connections at once (`{i}` in PATH
                                  numbered), prints {"stalled": COUNT} once every one sent its SENT
                                  bytes, then waits (at most WAIT s) for the receiver to close them
  unread PORT PATH LENGTH WAIT    one PUT of LENGTH bytes sent as fast as the receiver reads them
                                  until it stops reading (no progress for 1 s), prints {"blocked":
                                  bytes sent}, then waits (at most WAIT s) for the receiver to close
                                  the connection
  unread-answer PORT PATH SECONDS one GET of PATH whose answer is never read; prints {"asked": PATH},
                                  then holds the connection for SECONDS s or until SIGTERM
  busy PORT COUNT SECONDS         COUNT connections each send a PATCH head and one body byte of 2
                                  (busy: a request under way), print {"busy": ...}, then hold them
                                  for SECONDS s or until SIGTERM
  attack PORT SECONDS HALF STALLED HUGE
                                  the bench's attacker: keeps HALF half-open connections and STALLED
                                  stalled bodies open (reopening those the receiver closes) and makes
                                  HUGE patch uploads declaring 16 MiB of 1-byte chunks, each sent one
                                  chunk, for SECONDS s
"""

import base64
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

HALF_HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: half-open\r\nX-Unfinished: "


def raise_descriptor_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_answer(s):
    """Reads one HTTP answer (head and Content-Length body); returns (status, head text)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before an answer: " + repr(data[:200]))
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    text = head.decode("latin-1")
    length = 0
    for line in text.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(text.split()[1]), text


def health_ms(port):
    """One GET /health on a fresh connection, in milliseconds from connect to the whole answer."""
    start = time.monotonic()
    s = connect(port)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        status, _ = read_answer(s)
    finally:
        s.close()
    if status != 200:
        raise RuntimeError(f"/health answered {status}")
    return (time.monotonic() - start) * 1000


def peer_closed(s):
    """Reads what a non-blocking socket that polled readable holds: True when the receiver closed
    it (end of stream or reset), False when bytes arrived (an answer before the close) or none yet."""
    try:
        return not s.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except BlockingIOError:
        return False


def wait_closed(sockets, opened, wait):
    """Waits (at most `wait` s) until the receiver closes each socket (end of stream or reset);
    returns {fd: seconds from its opening to its closing}."""
    poller = select.epoll()
    by_fd = {}
    for s in sockets:
        s.setblocking(False)
        poller.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR)
        by_fd[s.fileno()] = s
    closed = {}
    deadline = time.monotonic() + wait
    while len(closed) < len(by_fd):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for fd, _ in poller.poll(min(left, 1.0)):
            if not peer_closed(by_fd[fd]):
                continue  # an answer (a 400, say) before the close: keep waiting for the close
            closed[fd] = time.monotonic() - opened[fd]
            poller.unregister(fd)
    poller.close()
    return closed


def summary(label, count, closed, extra=None):
    times = sorted(closed.values())
    result = {
        label: count,
        "closed": len(closed),
        "firstClosedAfter": round(times[0], 3) if times else None,
        "lastClosedAfter": round(times[-1], 3) if times else None,
    }
    result.update(extra or {})
    return result


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def settled_descriptors(pid, bound=60.0):
    """The receiver's descriptor count once it has stopped changing (it has accepted what was sent)."""
    deadline = time.monotonic() + bound
    last, same = -1, 0
    while time.monotonic() < deadline and same < 5:
        now = descriptors(pid)
        same = same + 1 if now == last else 0
        last = now
        time.sleep(0.1)
    return last


def half_open(port, count, wait, pid=None):
    raise_descriptor_limit()
    sockets, opened = [], {}
    for _ in range(count):
        s = connect(port)
        s.sendall(HALF_HEAD)
        opened[s.fileno()] = time.monotonic()
        sockets.append(s)
    held = settled_descriptors(pid) if pid else None
    probes = [health_ms(port) for _ in range(5)]
    closed = wait_closed(sockets, opened, wait)
    extra = {"healthMs": [round(p, 1) for p in probes], "receiverDescriptorsWhileHeld": held,
             "openedInSeconds": round(max(opened.values()) - min(opened.values()), 2)}
    print(json.dumps(summary("opened", count, closed, extra)), flush=True)


def silent(port, count, wait):
    raise_descriptor_limit()
    sockets, opened = [], {}
    for _ in range(count):
        s = connect(port)
        opened[s.fileno()] = time.monotonic()
        sockets.append(s)
    closed = wait_closed(sockets, opened, wait)
    print(json.dumps(summary("silent", count, closed)), flush=True)


def idle(port, count, wait):
    raise_descriptor_limit()
    sockets, opened = [], {}
    for _ in range(count):
        s = connect(port)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, _ = read_answer(s)
        if status != 200:
            raise RuntimeError(f"/health answered {status}")
        opened[s.fileno()] = time.monotonic()
        sockets.append(s)
    closed = wait_closed(sockets, opened, wait)
    print(json.dumps(summary("idle", count, closed)), flush=True)


def stall(port, method, path, start, length, sent, wait, headers):
    s = connect(port)
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
    head += "".join(h + "\r\n" for h in headers) + "\r\n"
    s.sendall(head.encode() + bytes((start + i) % 251 for i in range(sent)))
    opened = {s.fileno(): time.monotonic()}
    stalled = {"stalled": sent}
    if method == "POST":
        # An IETF creation names its upload in a 104 before its body is read: its Location.
        s.settimeout(10)
        interim = b""
        while b"\r\n\r\n" not in interim:
            chunk = s.recv(4096)
            if not chunk:
                break
            interim += chunk
        for line in interim.decode("latin-1").split("\r\n"):
            if line.lower().startswith("location:"):
                stalled["location"] = line.split(":", 1)[1].strip()
        s.settimeout(None)
    print(json.dumps(stalled), flush=True)
    closed = wait_closed([s], opened, wait)
    print(json.dumps(summary("stalls", 1, closed)), flush=True)


def stall_many(port, count, method, path, length, sent, wait, headers):
    raise_descriptor_limit()
    sockets, opened = [], {}
    for i in range(count):
        s = connect(port)
        head = f"{method} {path.replace('{i}', str(i))} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
        head += "".join(h + "\r\n" for h in headers) + "\r\n"
        s.sendall(head.encode() + bytes(i % 251 for i in range(sent)))
        opened[s.fileno()] = time.monotonic()
        sockets.append(s)
    print(json.dumps({"stalled": count}), flush=True)
    closed = wait_closed(sockets, opened, wait)
    print(json.dumps(summary("stalls", count, closed)), flush=True)


def unread(port, path, length, wait):
    s = connect(port)
    s.sendall(f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n\r\n".encode())
    s.setblocking(False)
    block = b"u" * 65536
    sent, last_progress, started = 0, time.monotonic(), time.monotonic()
    while sent < length and time.monotonic() - last_progress < 1.0:
        select.select([], [s], [], 0.1)
        try:
            n = s.send(block[:min(len(block), length - sent)])
        except BlockingIOError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            # Closed by the receiver while this still sent.
            print(json.dumps({"blocked": sent}), flush=True)
            print(json.dumps(summary("unread", 1, {0: time.monotonic() - started})), flush=True)
            return
        if n:
            sent += n
            last_progress = time.monotonic()
    print(json.dumps({"blocked": sent}), flush=True)
    closed = wait_closed([s], {s.fileno(): time.monotonic()}, wait)
    print(json.dumps(summary("unread", 1, closed)), flush=True)


def unread_answer(port, path, seconds):
    s = connect(port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the receiver's side fills sooner
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    print(json.dumps({"asked": path}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(seconds)  # reading nothing is the point of this command; SIGTERM ends it early
    s.close()


def busy(port, count, seconds):
    raise_descriptor_limit()
    sockets = []
    for _ in range(count):
        s = connect(port)
        s.sendall(b"PATCH /files/busy HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
                  b"Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nTus-Resumable: 1.0.0\r\n\r\nx")
        sockets.append(s)
    print(json.dumps({"busy": count}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(seconds)  # the connections' lifetime, the point of this command; SIGTERM ends it early
    for s in sockets:
        s.close()


# ---------------------------------------------------------------- the bench's attacker

def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def request(port, method, path, headers, body=b""):
    s = connect(port)
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        s.sendall(head.encode() + body)
        status, text = read_answer_with_body(s)
        return status, text
    finally:
        s.close()


def read_answer_with_body(s):
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode("utf-8", "replace")


def declared_huge(port, index):
    """POST /uploads declaring 16 MiB in 1-byte chunks, then its first chunk with a CRC-32C digest."""
    status, body = request(port, "POST", "/uploads", {"Content-Type": "application/json"},
                           json.dumps({"fileName": f"huge-{index}.bin", "size": 16777216, "chunkSize": 1}).encode())
    if status != 201:
        return status
    upload = json.loads(body)["uploadId"]
    digest = base64.b64encode(struct.pack(">I", crc32c(b"x"))).decode()
    status, _ = request(port, "PATCH", f"/uploads/{upload}/chunks/1",
                        {"Content-Range": "bytes 0-0/16777216", "Content-Digest": f"crc32c=:{digest}:"}, b"x")
    return status


def attack(port, seconds, half, stalled, huge):
    """Holds `half` half-open connections and `stalled` stalled bodies (a tus-like PATCH of 1 MiB that
    sends 1 KiB), reopening whatever the receiver closes, after making `huge` declared-huge uploads."""
    raise_descriptor_limit()
    statuses = [declared_huge(port, i) for i in range(huge)]
    poller = select.epoll()
    held = {}
    reopened = 0

    def open_one(kind):
        s = connect(port)
        if kind == "half":
            s.sendall(HALF_HEAD)
        else:
            s.sendall(b"PUT /raw/stalled-" + str(time.monotonic_ns()).encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Length: 1048576\r\n\r\n" + b"s" * 1024)
        s.setblocking(False)
        poller.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR)
        held[s.fileno()] = (s, kind)

    for _ in range(half):
        open_one("half")
    for _ in range(stalled):
        open_one("stalled")
    print(json.dumps({"attacking": len(held), "declaredHuge": statuses}), flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for fd, _ in poller.poll(0.5):
            s, kind = held[fd]
            if not peer_closed(s):
                continue
            poller.unregister(fd)
            del held[fd]
            s.close()
            open_one(kind)
            reopened += 1
    print(json.dumps({"held": len(held), "reopened": reopened}), flush=True)


def main(argv):
    command, args = argv[0], argv[1:]
    if command == "half-open":
        half_open(int(args[0]), int(args[1]), float(args[2]), int(args[3]) if len(args) > 3 else None)
    elif command == "silent":
        silent(int(args[0]), int(args[1]), float(args[2]))
    elif command == "idle":
        idle(int(args[0]), int(args[1]), float(args[2]))
    elif command == "stall":
        stall(int(args[0]), args[1], args[2], int(args[3]), int(args[4]), int(args[5]), float(args[6]), args[7:])
    elif command == "stall-many":
        stall_many(int(args[0]), int(args[1]), args[2], args[3], int(args[4]), int(args[5]), float(args[6]), args[7:])
    elif command == "unread":
        unread(int(args[0]), args[1], int(args[2]), float(args[3]))
    elif command == "unread-answer":
        unread_answer(int(args[0]), args[1], float(args[2]))
    elif command == "busy":
        busy(int(args[0]), int(args[1]), float(args[2]))
    elif command == "attack":
        attack(int(args[0]), float(args[1]), int(args[2]), int(args[3]), int(args[4]))
    else:
        raise SystemExit(f"unknown command {command!r}\n" + __doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
