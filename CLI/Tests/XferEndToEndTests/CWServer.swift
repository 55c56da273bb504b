import Foundation
import XferTestSupport

/// A real HTTP server on 127.0.0.1 that speaks the CW protocol (see
/// `CWBackend`), written in Python so it shares no code with xfer: a
/// misreading of the contract on either side shows up as a failure.
///
/// It keeps each chunk in its own file (written, fsynced, renamed), so it
/// needs no chunk size; once it holds every chunk it assembles the file,
/// checks its MD5 against `saveName`, and names the URL in that answer.
/// `GET /uploads/{saveName}` is a test hook reporting what it holds, and
/// `GET /files/{saveName}/{name}` serves assembled files.
final class CWServer {
    let child: ChildProcess
    let url: String

    init(root: String) throws {
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let script = (root as NSString).appendingPathComponent("cw_server.py")
        try Self.script.write(toFile: script, atomically: true, encoding: .utf8)
        (child, url) = try startServer("the CW server", executable: "/usr/bin/env", arguments: ["python3", script, root])
    }

    deinit {
        child.kill(SIGKILL)
        child.wait()
    }

    /// What the server holds of the upload named `saveName` (the file's MD5).
    func upload(_ saveName: String) throws -> [String: Any] {
        try getJSON(url + "/uploads/" + saveName)
    }

    static let script = #"""
        import hashlib, json, os, sys, threading, urllib.parse, uuid
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        ROOT = os.path.join(sys.argv[1], "uploads")
        os.makedirs(ROOT, exist_ok=True)
        LOCK = threading.Lock()
        POSTS = {}  # saveName -> chunk uploads received since start

        def folder(save_name):
            return os.path.join(ROOT, save_name)

        def meta(save_name):
            try:
                with open(os.path.join(folder(save_name), "meta.json")) as f:
                    return json.load(f)
            except (OSError, ValueError):
                return None

        def durable_write(path, data):
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)

        def received(save_name, chunks):
            return [n for n in range(1, chunks + 1) if os.path.exists(os.path.join(folder(save_name), "chunk-%d" % n))]

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self, status, obj=None, body=None, ctype="application/json"):
                data = body if body is not None else json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def base(self):
                return "http://%s:%d" % self.server.server_address[:2]

            def do_GET(self):
                parts = self.path.split("/")
                if len(parts) == 3 and parts[1] == "uploads":
                    m = meta(parts[2])
                    if m is None:
                        return self.answer(404, {"error": "unknown upload"})
                    with LOCK:
                        posts = POSTS.get(parts[2], 0)
                    return self.answer(200, {"received": received(parts[2], m["chunks"]), "chunks": m["chunks"],
                                             "complete": os.path.exists(os.path.join(folder(parts[2]), "complete")),
                                             "posts": posts, "params": m["params"]})
                if len(parts) == 4 and parts[1] == "files":
                    path = os.path.join(folder(parts[2]), "file")
                    m = meta(parts[2])
                    if m is None or not os.path.exists(os.path.join(folder(parts[2]), "complete")):
                        return self.answer(404, {"error": "no such file"})
                    with open(path, "rb") as f:
                        return self.answer(200, body=f.read(), ctype="application/octet-stream")
                self.answer(404, {"error": "no route"})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("api_version") != "v1":
                    return self.answer(400, {"code": "400", "desc": "api_version v1 required"})
                if self.path == "/upload/checkFileChunk":
                    return self.check(body)
                if self.path == "/upload/file":
                    return self.chunk(body)
                self.answer(404, {"error": "no route"})

            def check(self, body):
                form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode(), keep_blank_values=True).items()}
                save_name = form.get("saveName", "")
                try:
                    chunks = int(form.get("chunks", ""))
                except ValueError:
                    chunks = 0
                if not form.get("bizId") or not form.get("fileName") or chunks < 1 or len(save_name) != 32 \
                        or any(c not in "0123456789abcdef" for c in save_name):
                    return self.answer(200, {"code": "500", "desc": "bad checkFileChunk form: %r" % form})
                with LOCK:
                    m = meta(save_name)
                    if m is None or m["chunks"] != chunks or m["fileName"] != form["fileName"]:
                        os.makedirs(folder(save_name), exist_ok=True)
                        for name in os.listdir(folder(save_name)):
                            os.remove(os.path.join(folder(save_name), name))
                        m = {"chunks": chunks, "fileName": form["fileName"],
                             "params": {"bizId": form["bizId"], "saveName": save_name,
                                        "uploadId": uuid.uuid4().hex, "uploadToken": "tok-" + uuid.uuid4().hex}}
                        durable_write(os.path.join(folder(save_name), "meta.json"), json.dumps(m).encode())
                self.answer(200, {"code": "200", "data": m["params"]})

            def chunk(self, body):
                ctype = self.headers.get("Content-Type", "")
                if "boundary=" not in ctype:
                    return self.answer(400, {"error": "not multipart"})
                boundary = ctype.split("boundary=", 1)[1].strip().strip('"').encode()
                fields, data = {}, None
                for part in body.split(b"--" + boundary)[1:]:
                    if part.startswith(b"--"):
                        break
                    head, _, content = part[2:].partition(b"\r\n\r\n")
                    content = content[:-2]  # the CRLF before the next boundary
                    disposition = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-disposition")][0].decode()
                    name = disposition.split('name="', 1)[1].split('"', 1)[0]
                    if 'filename="' in disposition:
                        data = content
                    else:
                        fields[name] = content.decode()
                save_name = fields.get("saveName", "")
                with LOCK:
                    m = meta(save_name) if save_name else None
                    POSTS[save_name] = POSTS.get(save_name, 0) + 1
                if m is None or fields.get("uploadId") != m["params"]["uploadId"]:
                    return self.answer(404, {"error": "unknown upload"})
                if any(fields.get(k) != v for k, v in m["params"].items()):
                    return self.answer(400, {"error": "the upload parameters were not echoed"})
                try:
                    number = int(fields.get("chunk", ""))
                except ValueError:
                    number = 0
                if data is None or not 1 <= number <= m["chunks"]:
                    return self.answer(400, {"error": "bad chunk number or no file part"})
                durable_write(os.path.join(folder(save_name), "chunk-%d" % number), data)
                with LOCK:
                    done = os.path.exists(os.path.join(folder(save_name), "complete"))
                    if not done and len(received(save_name, m["chunks"])) == m["chunks"]:
                        digest = hashlib.md5()
                        with open(os.path.join(folder(save_name), "file.tmp"), "wb") as out:
                            for n in range(1, m["chunks"] + 1):
                                with open(os.path.join(folder(save_name), "chunk-%d" % n), "rb") as f:
                                    piece = f.read()
                                digest.update(piece)
                                out.write(piece)
                            out.flush()
                            os.fsync(out.fileno())
                        if digest.hexdigest() != save_name:
                            return self.answer(500, {"error": "assembled file does not match saveName"})
                        os.replace(os.path.join(folder(save_name), "file.tmp"), os.path.join(folder(save_name), "file"))
                        durable_write(os.path.join(folder(save_name), "complete"), b"1")
                        done = True
                if done:
                    url = "%s/files/%s/%s" % (self.base(), save_name, urllib.parse.quote(m["fileName"]))
                    return self.answer(200, {"code": "200", "data": {"url": url}})
                self.answer(200, {"code": "200"})

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        print("listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
        server.serve_forever()
        """#
}
