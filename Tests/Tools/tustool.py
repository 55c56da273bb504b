"""The tus side of xfer's tests and benchmarks, independent of xfer.

  tustool.py serve [resumable-upload serve options...]
      the PyPI tus server `resumable-upload` on 127.0.0.1, port chosen by the
      system; prints "listening on http://127.0.0.1:PORT/files/", then serves
      until killed
  tustool.py upload URL FILE CHUNK_SIZE [--checksum]
      the official tus client (tuspy) uploads FILE to the creation URL;
      prints the upload's URL
"""
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


def upload(url, path, chunk_size, checksum):
    from tusclient import client

    uploader = client.TusClient(url).uploader(path, chunk_size=int(chunk_size), upload_checksum=checksum,
                                              metadata={"filename": path.rsplit("/", 1)[-1]})
    uploader.upload()
    print(uploader.url, flush=True)
    return 0


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "serve":
        sys.exit(serve(sys.argv[2:]))
    elif command == "upload":
        sys.exit(upload(sys.argv[2], sys.argv[3], sys.argv[4], "--checksum" in sys.argv[5:]))
    sys.exit(f"unknown command {command}")
