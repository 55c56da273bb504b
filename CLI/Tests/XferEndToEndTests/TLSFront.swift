import Foundation
import XCTest
import XferTestSupport

/// An HTTPS front to a plain-HTTP `xfer serve` (the receiver speaks plain
/// HTTP only), with a self-signed certificate for 127.0.0.1 made by the test.
final class TLSFront {
    let child: ChildProcess
    /// https://127.0.0.1:PORT
    let url: String
    let port: Int
    /// The PEM certificate to trust (`--cacert`).
    let certificate: String

    /// A TLS-terminating proxy to `upstream`, in Python so the test needs
    /// nothing beyond what CI images carry; it prints its port when ready.
    private static let script = """
        import http.client, http.server, ssl, sys
        upstream_port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        class Proxy(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *args): pass
            def forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "expect")}
                connection = http.client.HTTPConnection("127.0.0.1", upstream_port)
                connection.request(self.command, self.path, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD": self.wfile.write(data)
            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = forward
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        print("listening on %d" % server.server_address[1], flush=True)
        server.serve_forever()
        """

    /// Starts the front to the receiver on `upstreamPort`, keeping its files in `work`.
    init(upstreamPort: Int, in work: TemporaryDirectory) throws {
        let python = try Self.python()
        let (certificate, key) = try Self.makeCertificate(in: work)
        let script = work.file("tls-front.py")
        try Self.script.write(toFile: script, atomically: true, encoding: .utf8)
        child = try ChildProcess(executable: python, arguments: [script, String(upstreamPort), certificate, key])
        guard let ready = child.readLine(), ready.hasPrefix("listening on "), let port = Int(ready.dropFirst("listening on ".count)) else {
            child.kill()
            child.wait()
            throw HarnessError("the HTTPS front did not start: \(child.standardError)")
        }
        self.port = port
        self.certificate = certificate
        url = "https://127.0.0.1:\(port)"
    }

    deinit {
        child.kill()
        child.wait()
    }

    static func makeCertificate(in work: TemporaryDirectory) throws -> (cert: String, key: String) {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl") else {
            throw XCTSkip("the openssl command is needed to make a certificate")
        }
        let cert = work.file("cert.pem"), key = work.file("key.pem")
        let openssl = try ChildProcess(executable: "/usr/bin/openssl", arguments: [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ])
        _ = openssl.readRemaining()
        guard openssl.wait() == 0 else { throw HarnessError("openssl failed: \(openssl.standardError)") }
        return (cert, key)
    }

    static func python() throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
        for directory in path.split(separator: ":").map(String.init) + ["/usr/bin"] {
            let candidate = directory + "/python3"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw XCTSkip("python3 is needed for this test (an HTTPS front or a delay proxy)")
    }
}
