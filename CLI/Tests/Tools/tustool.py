"""The tus side of xfer's tests and benchmarks, independent of xfer.

  tustool.py serve [resumable-upload serve options...]
      the PyPI tus server `resumable-upload` on 127.0.0.1, port chosen by the
      system; prints "listening on http://127.0.0.1:PORT/files/", then serves
      until killed
  tustool.py upload URL FILE CHUNK_SIZE [--checksum] [--stop-at OFFSET] [--resume UPLOAD_URL]
      the official tus client (tuspy) uploads FILE to the creation URL;
      prints the upload's URL. --stop-at ends the upload once OFFSET bytes are
      stored (a client that went away); --resume goes on with an existing
      upload from the offset its HEAD reports, as tuspy resumes.
"""
import argparse
import sys


def serve(args):
    import resumable_upload.cli as cli

    class Announcing(cli._ThreadingHTTPServer):
        def server_activate(self):
            super().server_activate()
            host, port = self.server_address[:2]
            print(f"listening on http://{host}:{port}/files/", flush=True)

    cli._ThreadingHTTPServer = Announcing
    return cli.main(["serve", "--host", "127.0.0.1", "--port", "0", "--log-level", "WARNING", *args])


def upload(args):
    from tusclient import client

    parser = argparse.ArgumentParser(prog="tustool.py upload")
    parser.add_argument("url")
    parser.add_argument("file")
    parser.add_argument("chunk_size", type=int)
    parser.add_argument("--checksum", action="store_true")
    parser.add_argument("--stop-at", type=int)
    parser.add_argument("--resume")
    options = parser.parse_args(args)
    uploader = client.TusClient(options.url).uploader(
        options.file, chunk_size=options.chunk_size, upload_checksum=options.checksum, url=options.resume,
        metadata={"filename": options.file.rsplit("/", 1)[-1]})
    uploader.upload(stop_at=options.stop_at)
    print(uploader.url, flush=True)
    return 0


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "serve":
        sys.exit(serve(sys.argv[2:]))
    elif command == "upload":
        sys.exit(upload(sys.argv[2:]))
    sys.exit(f"unknown command {command}")
