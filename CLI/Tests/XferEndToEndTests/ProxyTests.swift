import Foundation
import XCTest
import XferTestSupport

/// Pushes through a real HTTP proxy (Debian's tinyproxy, started by each
/// test): plain HTTP forwarded by the proxy, HTTPS through CONNECT, the
/// proxy environment variables as libcurl reads them, `--proxy none`, and a
/// proxy's password kept out of every message. The proxy's log proves which
/// requests went through it.
final class ProxyTests: XCTestCase {
    var work: TemporaryDirectory!

    override func setUp() {
        work = TemporaryDirectory("xfer-proxy")
    }

    override func tearDown() {
        work = nil
    }

    /// Every proxy variable libcurl reads, so that the machine's own settings
    /// do not count: `env -u` removes them, then the test's own are set.
    private static let proxyVariables = [
        "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY",
    ]

    /// Runs `xfer` with only `variables` among the proxy variables.
    private func xfer(_ arguments: [String], proxyVariables variables: [String: String]) throws -> RunResult {
        let unset = Self.proxyVariables.flatMap { ["-u", $0] }
        let set = variables.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return try runToEnd("/usr/bin/env", unset + set + [xferExecutable] + arguments)
    }

    private func push(_ file: String, to url: String, _ extra: [String], proxyVariables variables: [String: String] = [:])
        throws -> RunResult
    {
        try xfer(
            ["push", file, "--backend", "patch", "--to", url, "--chunk-size", "64KiB", "--state", work.file("state-\(UUID().uuidString)")]
                + extra, proxyVariables: variables)
    }

    /// `patch` over plain HTTP through `--proxy`: every request is in the
    /// proxy's log, and the receiver holds the very bytes.
    func testPatchOverHTTPGoesThroughTheProxy() throws {
        let proxy = try TinyProxy(in: work)
        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 300_000)

        let pushed = try push(file, to: server.url, ["--proxy", proxy.url])
        XCTAssertEqual(pushed.status, 0, pushed.stderr)
        XCTAssertEqual(pushed.stderrWithoutProgress, "")
        let url = try XCTUnwrap(pushed.stdout.first)
        XCTAssertEqual(try downloadSHA256(url, into: work), try sha256sum(file))

        let requests = try proxy.requests()
        let base = "http://127.0.0.1:\(server.port)/uploads"
        XCTAssertEqual(requests.filter { $0.hasPrefix("POST \(base) ") }.count, 1, "create: \(requests)")
        XCTAssertEqual(requests.filter { $0.hasPrefix("PATCH \(base)/") && $0.contains("/chunks/") }.count, 5, "300,000 bytes in 64 KiB chunks: \(requests)")
        XCTAssertEqual(requests.filter { $0.hasPrefix("POST \(base)/") && $0.contains("/complete ") }.count, 1, "complete: \(requests)")
        // The bytes the receiver took are the file's, once: all of it came through the proxy.
        XCTAssertEqual(int(try getJSON(server.url + "/stats")["payloadBytesReceived"]), 300_000)
    }

    /// HTTPS goes through the proxy's CONNECT tunnel (named by HTTPS_PROXY,
    /// as curl reads it); `--proxy none` ignores that variable.
    func testHTTPSGoesThroughCONNECTAndProxyNoneBypassesTheEnvironment() throws {
        let server = try ServeProcess(root: work.file("server"))
        let front = try TLSFront(upstreamPort: server.port, in: work)
        let proxy = try TinyProxy(in: work, connectPorts: [front.port])
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 300_000)
        let tunnel = "CONNECT 127.0.0.1:\(front.port) "

        let tunnelled = try push(file, to: front.url, ["--cacert", front.certificate], proxyVariables: ["HTTPS_PROXY": proxy.url])
        XCTAssertEqual(tunnelled.status, 0, tunnelled.stderr)
        // The receiver names its plain-HTTP self in URLs; fetch the same path from it directly.
        let path = try XCTUnwrap(tunnelled.stdout.first.flatMap { URLComponents(string: $0)?.path })
        XCTAssertEqual(try downloadSHA256(server.url + path, into: work), try sha256sum(file))
        let requests = try proxy.requests()
        let tunnels = requests.filter { $0.hasPrefix(tunnel) }.count
        XCTAssertGreaterThanOrEqual(tunnels, 1, "the push opened its connections through CONNECT: \(requests)")

        let direct = try push(file, to: front.url, ["--cacert", front.certificate, "--proxy", "none"], proxyVariables: ["HTTPS_PROXY": proxy.url])
        XCTAssertEqual(direct.status, 0, direct.stderr)
        XCTAssertEqual(try proxy.requests().filter { $0.hasPrefix(tunnel) }.count, tunnels, "--proxy none: nothing through the proxy")
    }

    /// libcurl's rules for plain HTTP, which xfer keeps: lowercase
    /// `http_proxy` only (uppercase `HTTP_PROXY` is ignored), ALL_PROXY as a
    /// fallback, 127.0.0.1 not exempt unless NO_PROXY names it, and NO_PROXY
    /// applying to `--proxy` too.
    func testProxyEnvironmentIsReadAsCurlReadsIt() throws {
        let proxy = try TinyProxy(in: work)
        let server = try ServeProcess(root: work.file("server"))
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 100_000)
        let cases: [(label: String, extra: [String], variables: [String: String], proxied: Bool)] = [
            ("http_proxy", [], ["http_proxy": proxy.url], true),
            ("HTTP_PROXY alone", [], ["HTTP_PROXY": proxy.url], false),
            ("ALL_PROXY", [], ["ALL_PROXY": proxy.url], true),
            ("http_proxy with NO_PROXY=127.0.0.1", [], ["http_proxy": proxy.url, "NO_PROXY": "127.0.0.1"], false),
            ("--proxy with NO_PROXY=127.0.0.1", ["--proxy", proxy.url], ["NO_PROXY": "127.0.0.1"], false),
            ("--proxy none over http_proxy", ["--proxy", "none"], ["http_proxy": proxy.url], false),
        ]
        for (label, extra, variables, proxied) in cases {
            let before = try proxy.requests().count
            let pushed = try push(file, to: server.url, extra, proxyVariables: variables)
            XCTAssertEqual(pushed.status, 0, "\(label): \(pushed.stderr)")
            let through = try proxy.requests().dropFirst(before)
            if proxied {
                XCTAssertTrue(through.contains { $0.hasPrefix("PATCH http://127.0.0.1:\(server.port)/uploads/") }, "\(label): \(Array(through))")
            } else {
                XCTAssertTrue(through.isEmpty, "\(label): nothing through the proxy, got \(Array(through))")
            }
        }
    }

    /// A proxy's user name and password are used, and never printed: not
    /// when the proxy refuses them, nor when it cannot be reached, nor when
    /// the URL is refused, from `--proxy` or from the environment.
    func testProxyCredentialsAreUsedAndNeverPrinted() throws {
        let server = try ServeProcess(root: work.file("server"))
        let front = try TLSFront(upstreamPort: server.port, in: work)
        let password = "pw-\(UUID().uuidString)"
        let proxy = try TinyProxy(in: work, connectPorts: [front.port], basicAuth: (user: "xfer", password: password))
        let file = work.file("a.bin")
        try makeTestFile(at: file, size: 100_000)
        let withCredentials = "http://xfer:\(password)@127.0.0.1:\(proxy.port)"
        let wrongPassword = "http://xfer:wrong-\(password)@127.0.0.1:\(proxy.port)"
        let dead = try RawListener(.hangUp)
        let deadPort = dead.port
        dead.close()
        let unreachable = "http://xfer:\(password)@127.0.0.1:\(deadPort)"
        var outputs: [(String, RunResult)] = []

        let good = try push(file, to: server.url, ["--proxy", withCredentials])
        XCTAssertEqual(good.status, 0, good.stderr)
        XCTAssertTrue(try proxy.requests().contains { $0.hasPrefix("PATCH ") }, "the proxy took the credentials")
        let goodTLS = try push(file, to: front.url, ["--cacert", front.certificate], proxyVariables: ["https_proxy": withCredentials])
        XCTAssertEqual(goodTLS.status, 0, goodTLS.stderr)
        outputs += [("good", good), ("good over TLS", goodTLS)]

        let failures: [(label: String, url: String, extra: [String], variables: [String: String], exit: Int32, mentions: String)] = [
            // tinyproxy answers 407 and closes the connection without reading the request's body: curl sees a reset.
            ("refused by the proxy", server.url, ["--proxy", wrongPassword], [:], 1, "transfer failed"),
            ("refused CONNECT", front.url, ["--cacert", front.certificate], ["HTTPS_PROXY": wrongPassword], 1, "CONNECT"),
            ("unreachable --proxy", server.url, ["--proxy", unreachable], [:], 1,
             "could not connect to 127.0.0.1:\(deadPort) (the proxy: connection refused)"),
            ("unreachable http_proxy", server.url, [], ["http_proxy": unreachable], 1, "could not connect"),
            ("a scheme curl has no proxy for", server.url, ["--proxy", "ftp://xfer:\(password)@127.0.0.1:21"], [:], 2,
             "--proxy: invalid URL ftp://127.0.0.1:21"),
            ("an unusable proxy in the environment", server.url, [], ["http_proxy": "gopher://xfer:\(password)@127.0.0.1:70"], 1, "proxy"),
        ]
        for failure in failures {
            let result = try push(file, to: failure.url, failure.extra + ["--max-attempts", "1"], proxyVariables: failure.variables)
            XCTAssertEqual(result.status, failure.exit, "\(failure.label): \(result.stderr)")
            XCTAssertEqual(result.stderr.split(separator: "\n").count, 1, "\(failure.label): one line, got \(result.stderr)")
            XCTAssertTrue(result.stderr.lowercased().contains(failure.mentions.lowercased()), "\(failure.label): \(result.stderr)")
            outputs.append((failure.label, result))
        }
        let json = try push(file, to: server.url, ["--proxy", unreachable, "--max-attempts", "1", "--json"])
        XCTAssertEqual(json.status, 1, json.stderr)
        outputs.append(("--json", json))

        for (label, result) in outputs {
            let everything = result.stdout.joined(separator: "\n") + result.stderr
            XCTAssertFalse(everything.contains(password), "\(label): the proxy's password is never printed: \(everything)")
        }
    }
}

/// A real HTTP proxy: Debian's tinyproxy on 127.0.0.1 in the foreground,
/// logging every request it takes to a file the test reads.
final class TinyProxy {
    let port: Int
    let child: ChildProcess
    private let logFile: String

    var url: String { "http://127.0.0.1:\(port)" }

    /// Starts the proxy. `connectPorts` are the ports CONNECT may reach;
    /// `basicAuth` makes it require those credentials.
    init(in work: TemporaryDirectory, connectPorts: [Int] = [], basicAuth: (user: String, password: String)? = nil) throws {
        let executable = try Self.executable()
        // tinyproxy takes no port 0: pick a free port, and try another if it
        // was taken in between.
        var failure = ""
        for _ in 1...5 {
            let directory = work.file("tinyproxy-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let probe = try RawListener(.hangUp)
            let port = probe.port
            probe.close()
            let logFile = directory + "/tinyproxy.log"
            var configuration = [
                "Port \(port)", "Listen 127.0.0.1", "Timeout 60", "LogFile \"\(logFile)\"", "LogLevel Info",
                "Allow 127.0.0.1", "MaxClients 50",
            ]
            configuration += connectPorts.map { "ConnectPort \($0)" }
            if let basicAuth { configuration.append("BasicAuth \(basicAuth.user) \(basicAuth.password)") }
            let configurationFile = directory + "/tinyproxy.conf"
            try (configuration.joined(separator: "\n") + "\n").write(toFile: configurationFile, atomically: true, encoding: .utf8)

            let child = try ChildProcess(executable: executable, arguments: ["-d", "-c", configurationFile])
            if try Self.waitUntilListening(child, logFile: logFile) {
                self.port = port
                self.child = child
                self.logFile = logFile
                return
            }
            child.kill()
            child.wait()
            failure = child.standardError + ((try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "")
        }
        throw HarnessError("tinyproxy did not start: \(failure)")
    }

    deinit {
        child.kill()
        child.wait()
    }

    /// The request lines the proxy took so far, in order:
    /// "PATCH http://127.0.0.1:4711/uploads/ab/chunks/1 HTTP/1.1", "CONNECT 127.0.0.1:4712 HTTP/1.1".
    func requests() throws -> [String] {
        // tinyproxy logs a request line when it reads it, before it forwards the request.
        let marker = "): "
        return try String(contentsOfFile: logFile, encoding: .utf8).split(separator: "\n").compactMap { line in
            guard line.contains("Request (file descriptor"), let range = line.range(of: marker) else { return nil }
            return String(line[range.upperBound...])
        }
    }

    /// Waits for the log line tinyproxy writes once it listens (true), or for
    /// it to exit (false: the port was taken); fails after 20 s.
    private static func waitUntilListening(_ child: ChildProcess, logFile: String) throws -> Bool {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if let log = try? String(contentsOfFile: logFile, encoding: .utf8), log.contains("Starting main loop") { return true }
            if !child.process.isRunning { return false }
            usleep(20_000)  // polling a file: there is nothing to block on
        }
        throw HarnessError("tinyproxy wrote no 'Starting main loop' within 20 s")
    }

    /// tinyproxy's path. Missing, the test is skipped where a developer runs it
    /// without `make test`, and fails on CI, where `make test` installs it.
    private static func executable() throws -> String {
        for candidate in ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"] where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        let reason = "tinyproxy is not installed (scripts/install-deps.sh installs it: `make test` runs that)"
        if ProcessInfo.processInfo.environment["CI"] == "true" { throw HarnessError(reason) }
        throw XCTSkip(reason)
    }
}
