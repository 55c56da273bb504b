#!/usr/bin/env python3
"""A link with latency, for tests and benchmarks: a TCP proxy on 127.0.0.1.

This kernel has no `netem`, so the round trip a user meets across the internet
is made here in user space. Every byte read on one side is written on the
other `--delay-ms` later (one way; the round trip is twice that). A new
connection pays one round trip before its first byte goes on, as a TCP
handshake would. `--rate-mbit` caps each direction as one link shared by all
connections: bytes queue behind each other, as on a real bottleneck.
`--window` bounds the bytes one connection may have on the wire per
direction, as a TCP window does (4 MiB: Linux's default maximum send buffer).

Usage: delay-proxy.py --target HOST:PORT [--port 0] [--delay-ms 25]
                      [--rate-mbit 200] [--window BYTES]
Prints `listening on http://127.0.0.1:PORT` once ready. On SIGTERM or SIGINT it
prints one JSON line of what it saw and exits:
  connections  connections accepted
  exchanges    request/answer turns: a connection whose last bytes went
               downstream (or none) sends bytes upstream again. On HTTP/1.1
               without pipelining that is one request.
  peak_busy    the most connections at once waiting for an answer (bytes went
               upstream since the last bytes came back): requests in flight.
  upstream_bytes, downstream_bytes
"""
import argparse
import asyncio
import json
import os
import signal

CHUNK = 64 * 1024


class Link:
    """One direction of the link, shared by every connection."""

    def __init__(self, delay, rate):
        self.delay = delay
        self.rate = rate  # bytes per second, or None
        self.free_at = 0.0

    def arrival(self, size, now):
        """When `size` bytes read now arrive at the far side."""
        if not self.rate:
            return now + self.delay
        start = max(now, self.free_at)
        self.free_at = start + size / self.rate
        return self.free_at + self.delay


class Stats:
    def __init__(self):
        self.connections = 0
        self.exchanges = 0
        self.busy = 0
        self.peak_busy = 0
        self.up = 0
        self.down = 0


class Connection:
    def __init__(self, stats):
        self.stats = stats
        self.waiting = False  # bytes went upstream and no answer came back yet

    def sent_up(self, size):
        self.stats.up += size
        if not self.waiting:
            self.waiting = True
            self.stats.exchanges += 1
            self.stats.busy += 1
            self.stats.peak_busy = max(self.stats.peak_busy, self.stats.busy)

    def came_down(self, size):
        self.stats.down += size
        self.done()

    def done(self):
        if self.waiting:
            self.waiting = False
            self.stats.busy -= 1


async def pipe(reader, writer, link, window, not_before, on_read):
    """Copies reader to writer, each piece held until the link delivers it."""
    queue = asyncio.Queue()
    room = asyncio.Semaphore(max(1, window // CHUNK))
    loop = asyncio.get_running_loop()

    async def deliver():
        while True:
            at, data = await queue.get()
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if data is None:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            room.release()
            await writer.drain()

    delivering = asyncio.ensure_future(deliver())
    try:
        while True:
            await room.acquire()
            data = await reader.read(CHUNK)
            now = loop.time()
            if not data:
                await queue.put((max(now + link.delay, not_before), None))
                break
            on_read(len(data))
            await queue.put((max(link.arrival(len(data), now), not_before), data))
        await delivering
    finally:
        delivering.cancel()


async def handle(client_reader, client_writer, args, up, down, stats):
    stats.connections += 1
    connection = Connection(stats)
    loop = asyncio.get_running_loop()
    # The handshake a real link makes costs one round trip before the first request byte
    # leaves, plus the one-way delay of that byte itself.
    not_before = loop.time() + 3 * up.delay
    try:
        server_reader, server_writer = await asyncio.open_connection(args.host, args.target_port)
    except OSError:
        client_writer.close()
        return
    try:
        await asyncio.gather(
            pipe(client_reader, server_writer, up, args.window, not_before, connection.sent_up),
            pipe(server_reader, client_writer, down, args.window, 0.0, connection.came_down))
    except (ConnectionError, OSError):
        pass
    finally:
        connection.done()
        for w in (server_writer, client_writer):
            w.close()


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="HOST:PORT of the server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=25.0, help="one-way delay")
    parser.add_argument("--rate-mbit", type=float, default=0.0, help="cap per direction, shared (0: none)")
    parser.add_argument("--window", type=int, default=4 << 20, help="bytes on the wire per connection and direction")
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    args.host, args.target_port = host or "127.0.0.1", int(port)
    delay = args.delay_ms / 1000
    rate = args.rate_mbit * 1e6 / 8 if args.rate_mbit > 0 else None
    up, down, stats = Link(delay, rate), Link(delay, rate), Stats()
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, args, up, down, stats), "127.0.0.1", args.port, reuse_address=True)
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    await stopped.wait()
    server.close()
    print(json.dumps({"connections": stats.connections, "exchanges": stats.exchanges, "peak_busy": stats.peak_busy,
                      "upstream_bytes": stats.up, "downstream_bytes": stats.down}), flush=True)
    # Connections still open end with the process: cancelling each of them would only print noise.
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
