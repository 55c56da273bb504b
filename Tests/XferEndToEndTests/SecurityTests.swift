import Foundation
import XCTest
import XferTestSupport

/// TLS verification (on by default, `--cacert`, `--insecure`) against a local
/// HTTPS front with a certificate made by the test, and the receiver's
/// `--auth-token`.
final class SecurityTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-sec")
    }

    override func tearDown() {
        work = nil
    }

    /// A TLS-terminating proxy to `upstream`, in Python so the test needs
    /// nothing beyond what CI images carry; it prints its port when ready.
    private static let proxyScript = """
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

    private func makeCertificate() throws -> (cert: String, key: String) {
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

    private func python() throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
        for directory in path.split(separator: ":").map(String.init) + ["/usr/bin"] {
            let candidate = directory + "/python3"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw XCTSkip("python3 is needed for the HTTPS front")
    }

    func testTLSIsVerifiedByDefaultAndCACertOrInsecureWork() throws {
        let python = try python()
        let (cert, key) = try makeCertificate()
        let server = try ServeProcess(root: work.file("server"))
        let script = work.file("proxy.py")
        try Self.proxyScript.write(toFile: script, atomically: true, encoding: .utf8)
        let proxy = try ChildProcess(executable: python, arguments: [script, String(server.port), cert, key])
        defer {
            proxy.kill()
            proxy.wait()
        }
        let ready = try XCTUnwrap(proxy.readLine(), "the proxy did not start: \(proxy.standardError)")
        let httpsURL = "https://127.0.0.1:" + ready.dropFirst("listening on ".count)
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 300_000)
        let base = ["push", file, "--backend", "patch", "--to", httpsURL, "--chunk-size", "64KiB"]

        let refused = try runXfer(base + ["--state", work.file("state1")])
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.lowercased().contains("certificate"), refused.stderr)
        XCTAssertEqual(refused.stderr.split(separator: "\n").count, 1, refused.stderr)

        let trusted = try runXfer(base + ["--state", work.file("state2"), "--cacert", cert])
        XCTAssertEqual(trusted.status, 0, trusted.stderr)
        XCTAssertEqual(trusted.stderrWithoutProgress, "", "nothing to warn about")
        // The receiver names its plain-HTTP self in URLs; fetch the same path from it directly.
        let path = try XCTUnwrap(trusted.stdout.first.flatMap { URLComponents(string: $0)?.path })
        XCTAssertEqual(try downloadSHA256(server.url + path, into: work), try sha256sum(file))

        let insecure = try runXfer(base + ["--state", work.file("state3"), "--insecure"])
        XCTAssertEqual(insecure.status, 0, insecure.stderr)
        XCTAssertTrue(insecure.stderr.contains("warning: --insecure"), insecure.stderr)
        XCTAssertEqual(insecure.stderrWithoutProgress.split(separator: "\n").count, 1, insecure.stderr)

        let missing = try runXfer(base + ["--state", work.file("state4"), "--cacert", work.file("nope.pem")])
        XCTAssertEqual(missing.status, 2, missing.stderr)
        XCTAssertTrue(missing.stderr.contains("--cacert"), missing.stderr)
    }

    func testAuthTokenIsRequiredOnEveryRequestOfEveryBackend() throws {
        let token = "tok-\(UUID().uuidString)"
        let server = try ServeProcess(root: work.file("server"), extraArguments: ["--auth-token", token])
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 200_000)

        for backend in ["patch", "multipart", "sequence"] {
            let base = ["push", file, "--backend", backend, "--to", server.url, "--chunk-size", "64KiB"]
            let anonymous = try runXfer(base + ["--state", work.file("\(backend)-1")])
            XCTAssertEqual(anonymous.status, 1, "\(backend): \(anonymous.stderr)")
            XCTAssertTrue(anonymous.stderr.contains("401"), "\(backend): \(anonymous.stderr)")

            let wrong = try runXfer(base + ["--state", work.file("\(backend)-2"), "--token", "tok-wrong"])
            XCTAssertEqual(wrong.status, 1, "\(backend): \(wrong.stderr)")
            XCTAssertTrue(wrong.stderr.contains("401"), "\(backend): \(wrong.stderr)")
            XCTAssertFalse(wrong.stderr.contains("tok-wrong"), "the token is never printed")

            let good = try runXfer(base + ["--state", work.file("\(backend)-3"), "--token", token])
            XCTAssertEqual(good.status, 0, "\(backend): \(good.stderr)")
            let url = try XCTUnwrap(good.stdout.first)
            XCTAssertFalse(good.stdout.joined().contains(token) || good.stderr.contains(token), "the token is never printed")

            // Downloads need it too.
            let denied = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-s", "-o", "/dev/null", "-w", "%{http_code}", url])
            XCTAssertEqual(denied.readLine(), "401", backend)
            denied.wait()
            let copy = work.file("\(backend)-copy.bin")
            let allowed = try ChildProcess(executable: "/usr/bin/curl", arguments: [
                "-fsS", "-o", copy, "-H", "Authorization: Bearer \(token)", url,
            ])
            _ = allowed.readRemaining()
            XCTAssertEqual(allowed.wait(), 0, allowed.standardError)
            XCTAssertEqual(try sha256sum(copy), try sha256sum(file), backend)
        }
        // The refused attempts stored nothing: the only file bytes taken are the three good pushes'.
        let stats = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsS", "-H", "Authorization: Bearer \(token)", server.url + "/stats"])
        let body = stats.readRemaining().joined()
        XCTAssertEqual(stats.wait(), 0)
        let received = int((try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])?["payloadBytesReceived"])
        XCTAssertEqual(received, 3 * 200_000)
    }

    /// The state directory and everything in it are private to the user, even
    /// when the umask would let others read them.
    func testStateFilesArePrivateWhateverTheUmask() throws {
        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 100_000)
        let state = work.file("state")
        let shell = try ChildProcess(executable: "/bin/sh", arguments: [
            "-c", "umask 000; exec \"$0\" \"$@\"", xferExecutable, "push", file, "--backend", "patch", "--to", server.url, "--state", state,
        ])
        _ = shell.readRemaining()
        XCTAssertEqual(shell.wait(), 0, shell.standardError)
        var checked = 0
        let enumerator = try XCTUnwrap(FileManager.default.enumerator(atPath: state))
        for case let relative as String in enumerator {
            let path = state + "/" + relative
            var info = stat()
            XCTAssertEqual(lstat(path, &info), 0)
            let mode = info.st_mode & 0o777
            let isDirectory = info.st_mode & S_IFMT == S_IFDIR
            XCTAssertEqual(mode, isDirectory ? 0o700 : 0o600, "\(relative) has mode \(String(mode, radix: 8))")
            checked += 1
        }
        var top = stat()
        XCTAssertEqual(stat(state, &top), 0)
        XCTAssertEqual(top.st_mode & 0o777, 0o700)
        XCTAssertGreaterThanOrEqual(checked, 4, "db/, data.mdb, lock.mdb and the job lock at least")
    }
}
