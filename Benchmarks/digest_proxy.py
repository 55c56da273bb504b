#!/usr/bin/env python3
"""A reverse proxy for the benchmarks (`ONLY=datapath`): forwards 127.0.0.1:PORT to
UPSTREAM_PORT and removes the `Want-Content-Digest` header from every response (printing
a line "stripped" for each), so `xfer push --backend patch` against `xfer serve` behind
it takes the path of a server that advertises no digest (`Content-MD5` per chunk, the
file's SHA-256 checked at completion).

    python3 Benchmarks/digest_proxy.py UPSTREAM_PORT   -> prints "listening on http://127.0.0.1:PORT"

Requests go upstream untouched, byte for byte (os.splice through a pipe: the chunk bodies
are not copied into this process); responses are parsed only to find each head, and
their bodies (small JSON here) are copied. Python 3 standard library, Linux.
"""
import os
import socket
import sys
import threading

STRIP = b"want-content-digest:"
PIPE_SIZE = 1 << 20
PRINT = threading.Lock()


def pump_requests(src, dst):
    """Client -> upstream, spliced: socket -> pipe -> socket, no copy in user space."""
    r, w = os.pipe()
    try:
        try:
            import fcntl
            fcntl.fcntl(w, 1031, PIPE_SIZE)  # F_SETPIPE_SZ
        except OSError:
            pass
        sfd, dfd = src.fileno(), dst.fileno()
        while True:
            n = os.splice(sfd, w, PIPE_SIZE)
            if n == 0:
                break
            while n:
                n -= os.splice(r, dfd, n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        for s in (dst, src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def pump_responses(src, dst):
    """Upstream -> client: each response's head without Want-Content-Digest, then its body."""
    buf = b""

    def fill():
        nonlocal buf
        data = src.recv(1 << 16)
        if not data:
            raise EOFError
        buf += data

    def forward(left):
        """Sends the next `left` bytes of the stream on, unread."""
        nonlocal buf
        while left:
            if not buf:
                fill()
            piece = buf[:left]
            buf = buf[len(piece):]
            dst.sendall(piece)
            left -= len(piece)

    try:
        while True:
            while b"\r\n\r\n" not in buf:
                fill()
            end = buf.index(b"\r\n\r\n") + 4
            lines = buf[:end - 4].split(b"\r\n")
            buf = buf[end:]
            status = int(lines[0].split()[1])
            kept = [lines[0]] + [line for line in lines[1:] if not line.lower().startswith(STRIP)]
            dst.sendall(b"\r\n".join(kept) + b"\r\n\r\n")
            if len(kept) < len(lines):
                with PRINT:
                    print("stripped", flush=True)  # the bench counts these: the MD5 path was taken
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            if status < 200 or status in (204, 304):
                continue
            if b"content-length" in headers:
                forward(int(headers[b"content-length"]))
            elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
                while True:
                    while b"\r\n" not in buf:
                        fill()
                    line_end = buf.index(b"\r\n") + 2
                    size = int(buf[:line_end - 2].split(b";")[0], 16)
                    dst.sendall(buf[:line_end])
                    buf = buf[line_end:]
                    if size == 0:
                        # Trailers, then the empty line.
                        while True:
                            while b"\r\n" not in buf:
                                fill()
                            line_end = buf.index(b"\r\n") + 2
                            dst.sendall(buf[:line_end])
                            done = line_end == 2
                            buf = buf[line_end:]
                            if done:
                                break
                        break
                    forward(size + 2)  # the data and its CRLF
            else:
                # Delimited by the connection's end.
                dst.sendall(buf)
                buf = b""
                while True:
                    data = src.recv(1 << 16)
                    if not data:
                        raise EOFError
                    dst.sendall(data)
    except (EOFError, OSError, ValueError, IndexError):
        pass
    finally:
        for s in (dst, src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(upstream_port):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(f"listening on http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", upstream_port))
        except OSError:
            client.close()
            continue
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump_requests, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump_responses, args=(upstream, client), daemon=True).start()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
