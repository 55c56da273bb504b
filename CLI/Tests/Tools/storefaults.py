"""A store that fails on command, for xfer's end-to-end tests: an HTTP/1.1 proxy between
`xfer serve --storage s3://... --endpoint PROXY` and an S3 store (the Ceph gateway the tests
start). It forwards every request byte for byte -- the receiver signs its requests for the
proxy's address, and a Signature V4 covers the Host header and more, so nothing is rewritten --
and, when told, misbehaves on chosen requests, before or after the store applied them.

  storefaults.py UPSTREAM_URL   prints "listening on URL control CONTROL_URL", then serves until killed

The control side is plain HTTP with JSON bodies:

  POST CONTROL/rules   a rule (JSON object); the first rule that matches a request and has turns
                       left decides what happens to it. Matching: "method" (PUT, POST...),
                       "path" (a regular expression searched in the request target, path and
                       query), "header" (a header the request must carry, e.g. If-Match), "skip"
                       (matching requests let through first; default 0), "every" (acts on every
                       N-th matching request after those; default 1), "times" (how many it acts
                       on; default 1, null for no limit), "seconds" (for how long after it was
                       set it acts; default: no limit), "after" (a match of its own: the rule acts
                       only on requests that follow the first request it matches). "action":
                         fail   not forwarded: answered "status" (default 503) with an S3 error
                         drop   forwarded and applied, then the connection is closed unanswered
                         error  forwarded and applied, then answered "status" (default 500)
                         delay  forwarded and applied, its answer held "delay" seconds (default 1)
                       Answers {"rule": index}.
  POST CONTROL/stop    {"after": K}: the K-th request from now is forwarded and applied, then its
                       answer is held, and no later request is forwarded: the moment to kill the
                       store's client with everything it asked before K applied and nothing after.
  GET  CONTROL/stopped?timeout=S   waits (at most S seconds) for that: {"stopped": bool, "count": N}
  POST CONTROL/release the connections held are closed unanswered and forwarding resumes
  GET  CONTROL/log     every request seen, in order: [{"n", "method", "target", "action",
                       "status", "applied"}] ("applied": whether the store received it whole)
  POST CONTROL/reset   rules, stop, log and counts cleared
"""

import asyncio
import json
import re
import sys
import time
from urllib.parse import parse_qs, urlsplit


class Rule:
    def __init__(self, spec):
        self.method = spec.get("method")
        self.path = re.compile(spec["path"]) if spec.get("path") else None
        self.header = spec.get("header", "").lower() or None
        self.skip = int(spec.get("skip", 0))
        # Armed by the first request matching "after" (a rule of its own: method, path, header).
        self.after = Rule({**spec["after"], "action": "fail", "times": None}) if spec.get("after") else None
        self.every = int(spec.get("every", 1))
        self.seen = 0
        self.times = spec.get("times", 1)
        self.until = time.monotonic() + float(spec["seconds"]) if spec.get("seconds") is not None else None
        self.action = spec["action"]
        if self.action not in ("fail", "drop", "error", "delay"):
            raise ValueError(f"unknown action {self.action!r}")
        self.status = int(spec.get("status", 503 if self.action == "fail" else 500))
        self.delay = float(spec.get("delay", 1))

    def takes(self, method, target, headers):
        """Whether this rule acts on the request (and counts it if so)."""
        if self.after is not None:
            if self.after.takes(method, target, headers):
                self.after = None
            return False
        if self.until is not None and time.monotonic() > self.until:
            return False
        if self.times is not None and self.times <= 0:
            return False
        if self.method and self.method != method:
            return False
        if self.path and not self.path.search(target):
            return False
        if self.header and self.header not in headers:
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        self.seen += 1
        if self.seen % self.every:
            return False
        if self.times is not None:
            self.times -= 1
        return True


class Proxy:
    def __init__(self, upstream):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port or 80)
        self.reset()

    def reset(self):
        self.rules = []
        self.log = []
        self.stop_after = None
        self.count = 0
        self.stopped = asyncio.Event()
        # Set when the held connections are to go: each waits on its own generation's event.
        self.released = asyncio.Event()

    # The receiver's side.

    async def serve_client(self, reader, writer):
        try:
            while True:
                head = await read_head(reader)
                if head is None:
                    return
                method, target, headers = parse_request_head(head)
                if headers.get("expect", "").lower() == "100-continue":
                    # The body comes only once asked for (boto3 asks; xfer does not).
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await writer.drain()
                body = await read_request_body(reader, headers)
                keep = await self.handle(method, target, headers, head, body, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            writer.close()

    async def handle(self, method, target, headers, head, body, writer):
        """Answers one request; False when the connection is to be closed."""
        entry = {"n": len(self.log) + 1, "method": method, "target": target, "action": "forward", "status": None, "applied": False}
        self.log.append(entry)
        released = self.released
        if self.stop_after is not None:
            self.count += 1
            if self.count > self.stop_after:
                entry["action"] = "held unforwarded"
                await released.wait()
                return False
        holding = self.stop_after is not None and self.count == self.stop_after
        rule = None if holding else next((rule for rule in self.rules if rule.takes(method, target, headers)), None)
        if rule is not None and rule.action == "fail":
            entry["action"] = "fail"
            entry["status"] = rule.status
            writer.write(error_answer(rule.status, "ServiceUnavailable" if rule.status == 503 else "InternalError"))
            await writer.drain()
            return True
        status, answer = await self.forward(method, head, body)
        entry["applied"] = True
        entry["status"] = status
        if holding:
            entry["action"] = "stop"
            self.stopped.set()
            await released.wait()
            return False
        if rule is not None:
            entry["action"] = rule.action
            if rule.action == "drop":
                return False
            if rule.action == "error":
                entry["status"] = rule.status
                writer.write(error_answer(rule.status, "InternalError"))
                await writer.drain()
                return True
            if rule.action == "delay":
                await asyncio.sleep(rule.delay)
        writer.write(answer)
        await writer.drain()
        return b"connection: close" not in answer.split(b"\r\n\r\n", 1)[0].lower()

    async def forward(self, method, head, body):
        """Sends the request to the store on a connection of its own; its status and whole answer."""
        reader, writer = await asyncio.open_connection(*self.upstream)
        try:
            writer.write(head)
            for piece in body:
                writer.write(piece)
                await writer.drain()
            await writer.drain()
            while True:
                answer_head = await read_head(reader)
                if answer_head is None:
                    raise ConnectionError("the store closed without answering")
                status, answer_headers = parse_response_head(answer_head)
                # An interim answer (100 Continue to a request that asked) was given already.
                if not 100 <= status < 200:
                    break
            answer_body = await read_response_body(reader, method, status, answer_headers)
            return status, answer_head + answer_body
        finally:
            writer.close()

    # The control side.

    async def serve_control(self, reader, writer):
        try:
            head = await read_head(reader)
            if head is None:
                return
            method, target, headers = parse_request_head(head)
            body = b"".join(await read_request_body(reader, headers))
            status, answer = await self.control(method, target, json.loads(body) if body.strip() else {})
        except Exception as error:  # a test's mistake: say it, do not die
            status, answer = 400, {"error": str(error)}
        data = json.dumps(answer).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        await writer.drain()
        writer.close()

    async def control(self, method, target, body):
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        if method == "POST" and parts.path == "/rules":
            self.rules.append(Rule(body))
            return 200, {"rule": len(self.rules) - 1}
        if method == "POST" and parts.path == "/stop":
            self.stop_after = int(body["after"])
            self.count = 0
            return 200, {}
        if method == "GET" and parts.path == "/stopped":
            try:
                await asyncio.wait_for(self.stopped.wait(), float(query.get("timeout", ["30"])[0]))
            except asyncio.TimeoutError:
                pass
            return 200, {"stopped": self.stopped.is_set(), "count": self.count}
        if method == "POST" and parts.path == "/release":
            self.released.set()
            self.released = asyncio.Event()
            self.stop_after = None
            self.count = 0
            self.stopped = asyncio.Event()
            return 200, {}
        if method == "GET" and parts.path == "/log":
            return 200, self.log
        if method == "POST" and parts.path == "/reset":
            self.released.set()
            self.reset()
            return 200, {}
        return 404, {"error": f"no {method} {parts.path}"}


def error_answer(status, code):
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by storefaults.py</Message></Error>' % code
    ).encode()
    return (
        f"HTTP/1.1 {status} Injected\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)


async def read_head(reader):
    """The bytes of a message's head, its blank line included; None at a clean end of stream."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if not error.partial:
            return None
        raise


def parse_headers(lines):
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers


def parse_request_head(head):
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    return method, target, parse_headers(line for line in lines[1:] if line)


def parse_response_head(head):
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    return status, parse_headers(line for line in lines[1:] if line)


async def read_request_body(reader, headers):
    """The body as it came, in pieces (a chunked one with its framing, to forward as it is)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return [await read_chunked(reader)]
    length = int(headers.get("content-length", "0"))
    pieces = []
    while length > 0:
        piece = await reader.read(min(length, 1 << 20))
        if not piece:
            raise ConnectionError("the request ended early")
        pieces.append(piece)
        length -= len(piece)
    return pieces


async def read_response_body(reader, method, status, headers):
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await read_chunked(reader)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()


async def read_chunked(reader):
    raw = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        raw += line
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:
                trailer = await reader.readuntil(b"\r\n")
                raw += trailer
                if trailer == b"\r\n":
                    return bytes(raw)
        raw += await reader.readexactly(size + 2)


async def main():
    proxy = Proxy(sys.argv[1])
    # A request's head may be long (signed headers); the limit is readuntil's.
    server = await asyncio.start_server(proxy.serve_client, "127.0.0.1", 0, limit=1 << 20)
    control = await asyncio.start_server(proxy.serve_control, "127.0.0.1", 0, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    control_port = control.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{port} control http://127.0.0.1:{control_port}", flush=True)
    async with server, control:
        await asyncio.gather(server.serve_forever(), control.serve_forever())


if __name__ == "__main__":
    asyncio.run(main())
