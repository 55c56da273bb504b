import Crypto
import Foundation
import XCTest
import XferTestSupport

/// A real `xfer serve` child process on 127.0.0.1.
final class ServeProcess {
    let child: ChildProcess
    let url: String
    let root: String

    /// A receiver on `root`: a directory on disk, or, when the suites run over the object
    /// store (`SuiteStorage.isObjectStore`), a prefix of the suites' bucket named after
    /// `root`, so that a receiver restarted on the same root finds the same uploads.
    init(root: String, port: Int = 0, extraArguments: [String] = []) throws {
        self.root = root
        if let objectStore = try SuiteStorage.objectStore() {
            (child, url) = try startServer(
                "xfer serve", executable: xferExecutable,
                arguments: ["serve", "--port", String(port)] + objectStore.arguments(forRoot: root) + extraArguments,
                environment: ProcessInfo.processInfo.environment.merging(CephGateway.environment) { $1 })
        } else {
            (child, url) = try startServer(
                "xfer serve", executable: xferExecutable, arguments: ["serve", "--port", String(port), "--root", root] + extraArguments)
        }
    }

    /// A receiver on other storage than a root directory (`--storage ...` in `storage`).
    init(storage: [String], port: Int = 0, environment: [String: String]) throws {
        root = ""
        (child, url) = try startServer(
            "xfer serve", executable: xferExecutable, arguments: ["serve", "--port", String(port)] + storage,
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
    }

    var port: Int { Int(url.split(separator: ":").last ?? "0") ?? 0 }

    func stop() {
        child.kill(SIGTERM)
        child.wait()
    }

    deinit {
        child.kill(SIGKILL)
        child.wait()
    }
}

/// Where the receivers of the suites keep uploads: on disk (`make test`), or, with
/// `XFER_TEST_STORAGE=ceph` (`make test-objectstore`), in one bucket of the Ceph gateway the
/// tests start (`CephGateway`) — the same suites, so that every protocol is held to the same
/// expectations on both storages. A test that looks at the receiver's directory itself says so
/// with `try SuiteStorage.requireDisk()`, and is skipped over the object store.
enum SuiteStorage {
    static var isObjectStore: Bool { ProcessInfo.processInfo.environment["XFER_TEST_STORAGE"] == "ceph" }

    /// The bucket of the process's receivers, made on first use.
    struct ObjectStore {
        let gateway: CephGateway
        let bucket: String

        /// `--storage s3://BUCKET/roots/<root's last two components>`: readable in the bucket,
        /// and distinct per test (every test's directory has a unique name).
        func arguments(forRoot root: String) -> [String] {
            let components = root.split(separator: "/").suffix(2).map {
                String($0.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." ? $0 : "_" })
            }
            return ["--storage", "s3://\(bucket)/roots/" + components.joined(separator: "/"), "--endpoint", gateway.url]
        }
    }

    static func objectStore() throws -> ObjectStore? {
        guard isObjectStore else { return nil }
        return try madeBucket.get()
    }

    private static let madeBucket = Result { () throws -> ObjectStore in
        let gateway = try CephGateway.shared()
        return ObjectStore(gateway: gateway, bucket: try gateway.makeBucket())
    }

    /// A body cut mid-way keeps what arrived on disk; an object store keeps nothing of a request
    /// that did not end (Docs/architecture.md, "What differs from disk").
    static var keepsWhatArrivedOfACutBody: Bool { !isObjectStore }

    /// `--patch-chunk-size BYTES` over the object store, where the receiver otherwise answers
    /// chunks of at least 8 MiB: for a test whose point needs many chunks of the client's size.
    static func patchChunks(of bytes: Int) -> [String] {
        isObjectStore ? ["--patch-chunk-size", String(bytes)] : []
    }

    /// Skips the calling test over the object store: it reads the receiver's directory.
    static func requireDisk(_ why: String = "it reads the receiver's directory") throws {
        if isObjectStore { throw XCTSkip("on disk only: \(why)") }
    }
}

/// Starts a server whose first line on stdout is "listening on URL"; `what`
/// names it when it does not start.
func startServer(
    _ what: String, executable: String, arguments: [String], environment: [String: String]? = nil
) throws -> (child: ChildProcess, url: String) {
    let child = try ChildProcess(executable: executable, arguments: arguments, environment: environment)
    guard let line = child.readLine(), line.hasPrefix("listening on ") else {
        child.kill()
        child.wait()
        throw HarnessError("\(what) did not start: \(child.standardError)")
    }
    return (child, String(line.dropFirst("listening on ".count)))
}

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The outcome of one `xfer` run.
struct RunResult {
    var status: Int32
    var stdout: [String]
    var stderr: String

    /// NDJSON events (for --json runs).
    var events: [[String: Any]] {
        stdout.compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
    }

    var lastEvent: [String: Any]? { events.last }

    /// stderr less the progress lines a non-terminal stderr gets by default
    /// (`--progress lines`: `xfer: progress ...` and `xfer: done ...`):
    /// what is left is notes, warnings and errors.
    var stderrWithoutProgress: String {
        stderr.split(separator: "\n")
            .filter { !$0.hasPrefix("xfer: progress ") && !$0.hasPrefix("xfer: done ") }
            .map { $0 + "\n" }.joined()
    }
}

/// Runs `xfer` with `arguments` to the end.
func runXfer(_ arguments: [String], environment: [String: String] = [:]) throws -> RunResult {
    try runToEnd(xferExecutable, arguments, environment: environment)
}

/// Runs `executable` with `arguments` to the end.
func runToEnd(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws -> RunResult {
    let child = try ChildProcess(executable: executable, arguments: arguments, environment: environment)
    let lines = child.readRemaining()
    let status = child.wait()
    return RunResult(status: status, stdout: lines, stderr: child.standardError)
}

/// Runs `xfer push` with `arguments` (which must include `--json`) and
/// kills it with SIGKILL once its first chunk is acknowledged; returns the
/// job's id. The push must be long enough not to finish first (several
/// MiB in 64 KiB chunks, one at a time).
func pushKilledAfterFirstChunk(_ arguments: [String], environment: [String: String] = [:]) throws -> String {
    try pushKilled(arguments, afterChunks: 1, environment: environment)
}

/// Runs `xfer push` (or `resume`) with `arguments` (which must include
/// `--json`) and kills it with SIGKILL once `chunks` chunks are acknowledged
/// (their `chunk` events printed, so committed to the state); returns the
/// job's id. Chunks in flight at that moment may or may not have reached
/// the server.
func pushKilled(_ arguments: [String], afterChunks chunks: Int, environment: [String: String] = [:]) throws -> String {
    let child = try ChildProcess(executable: xferExecutable, arguments: arguments, environment: environment)
    let started = try XCTUnwrap(child.readLine { $0.contains("\"event\":\"started\"") }, child.standardError)
    for _ in 0..<chunks {
        guard child.readLine(where: { $0.contains("\"event\":\"chunk\"") }) != nil else { break }
    }
    child.kill(SIGSTOP)
    child.kill(SIGKILL)
    XCTAssertEqual(child.wait(), 128 + SIGKILL, "the push must die unfinished: \(child.standardError)")
    let event = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(started.utf8)) as? [String: Any])
    return try XCTUnwrap(event["job"] as? String)
}

/// Downloads `url` with the system's curl (independent of xfer) into a file
/// and returns that file's SHA-256.
func downloadSHA256(_ url: String, into directory: TemporaryDirectory) throws -> String {
    let target = directory.file("download-\(UUID().uuidString.prefix(6))")
    let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsS", "-o", target, url])
    _ = child.readRemaining()
    guard child.wait() == 0 else { throw HarnessError("curl \(url) failed: \(child.standardError)") }
    return try sha256sum(target)
}

/// GET `url` with curl and parse the JSON answer.
func getJSON(_ url: String) throws -> [String: Any] {
    let child = try ChildProcess(executable: "/usr/bin/curl", arguments: ["-fsS", url])
    let body = child.readRemaining().joined(separator: "\n")
    guard child.wait() == 0 else { throw HarnessError("curl \(url) failed: \(child.standardError)") }
    return (try JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:]
}

func int(_ value: Any?) -> Int {
    (value as? NSNumber)?.intValue ?? (value as? Int) ?? 0
}

/// A TCP socket on 127.0.0.1 that is not an HTTP server, for the ways a
/// server can fail before it says anything.
final class RawListener: @unchecked Sendable {
    // @unchecked: `descriptor` and `fillers` are set in init and only closed in `close`.
    enum Behaviour {
        /// Accepts each connection and closes it at once: an empty reply.
        case hangUp
        /// Never accepts, and fills its accept queue so that further SYNs are
        /// dropped: a connect that never completes, as behind a black-holing firewall.
        case blackHole
    }

    let port: Int
    private let descriptor: Int32
    private var fillers: [Int32] = []
    private var closed = false

    init(_ behaviour: Behaviour) throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.descriptor = descriptor
        guard descriptor >= 0 else { throw HarnessError("socket: \(errno)") }
        var yes: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(descriptor, behaviour == .blackHole ? 0 : 16) == 0 else { throw HarnessError("bind/listen: \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        var fillers: [Int32] = []

        switch behaviour {
        case .hangUp:
            let listening = descriptor
            Thread.detachNewThread {
                while true {
                    let connection = accept(listening, nil, nil)
                    if connection < 0 { return }
                    // FIN first, then wait for the client to go: it reads end-of-stream
                    // ("empty reply"), never a reset, whatever it was still sending.
                    shutdown(connection, Int32(SHUT_WR))
                    var sink = [UInt8](repeating: 0, count: 65536)
                    while read(connection, &sink, sink.count) > 0 {}
                    Glibc.close(connection)
                }
            }
        case .blackHole:
            // Linux queues backlog + 1 connections; these take every place.
            for _ in 0..<3 {
                let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
                _ = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                fillers.append(filler)
            }
        }
        self.fillers = fillers
    }

    var url: String { "http://127.0.0.1:\(port)" }

    /// Frees the port (for a real receiver to take over).
    func close() {
        guard !closed else { return }
        closed = true
        for filler in fillers { Glibc.close(filler) }
        fillers = []
        shutdown(descriptor, Int32(SHUT_RDWR))
        Glibc.close(descriptor)
    }

    deinit { close() }
}

/// A curl request's answer.
struct CurlReply {
    var status: Int
    /// Lowercased names; of several responses (a 1xx, then the final one) the last value wins.
    var headers: [String: String]
    /// Every status line curl received, interim responses included (`HTTP/1.1 104 ...`).
    var statusLines: [String]
    var body: Data
    var text: String { String(decoding: body, as: UTF8.self) }
}

/// One request with the system's curl, independent of xfer; files for it go to `work`.
func curlRequest(_ method: String, _ url: String, headers: [String] = [], body: Data? = nil, in work: TemporaryDirectory) throws -> CurlReply {
    let name = UUID().uuidString.prefix(8)
    let headerFile = work.file("h-\(name)"), bodyFile = work.file("b-\(name)")
    var arguments = ["-sS", "-D", headerFile, "-o", bodyFile, "-w", "%{http_code}"]
    // curl's -X HEAD would wait for a body that never comes.
    arguments += method == "HEAD" ? ["-I"] : ["-X", method]
    for header in headers { arguments += ["-H", header] }
    if let body {
        let upload = work.file("u-\(name)")
        try body.write(to: URL(fileURLWithPath: upload))
        arguments += ["--data-binary", "@" + upload]
        if !headers.contains(where: { $0.lowercased().hasPrefix("content-type:") }) {
            // curl would otherwise label the body a form.
            arguments += ["-H", "Content-Type:"]
        }
    }
    let child = try ChildProcess(executable: "/usr/bin/curl", arguments: arguments + [url])
    let status = child.readRemaining().joined()
    XCTAssertEqual(child.wait(), 0, "curl: \(child.standardError)")
    var fields: [String: String] = [:]
    var statusLines: [String] = []
    let rawHeaders = (try? String(contentsOfFile: headerFile, encoding: .utf8)) ?? ""
    for line in rawHeaders.split(whereSeparator: \.isNewline) {
        if line.hasPrefix("HTTP/") { statusLines.append(line.trimmingCharacters(in: .whitespaces)) }
        guard let colon = line.firstIndex(of: ":") else { continue }
        fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    let data = FileManager.default.contents(atPath: bodyFile) ?? Data()
    return CurlReply(status: Int(status) ?? -1, headers: fields, statusLines: statusLines, body: data)
}

/// Sends the head and part of the body of a request, then closes the connection: a client that
/// died mid-request.
func sendRequestAndHangUp(_ method: String, _ url: String, headers: [String], body: Data, in work: TemporaryDirectory) throws {
    let address = try XCTUnwrap(URL(string: url))
    let head = "\(method) \(address.path) HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers.map { $0 + "\r\n" }.joined() + "\r\n"
    let request = work.file("cut-\(UUID().uuidString.prefix(6))")
    try (Data(head.utf8) + body).write(to: URL(fileURLWithPath: request))
    let script = """
        import socket, sys
        connection = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        connection.sendall(open(sys.argv[2], "rb").read())
        connection.close()
        """
    let child = try ChildProcess(executable: try pythonTool(venv: "venv-tus"), arguments: ["-c", script, String(address.port ?? 0), request])
    _ = child.readRemaining()
    XCTAssertEqual(child.wait(), 0, child.standardError)
}

/// Where `xfer serve` published the completed file `path` (under its root's downloads/): the
/// one whose upload's meta names `path`.
func servedFile(root: String, _ path: String) throws -> String {
    let downloads = root + "/downloads"
    var ids = Set<String>()
    for entry in try FileManager.default.contentsOfDirectory(atPath: downloads) where entry.count >= 32 { ids.insert(String(entry.prefix(32))) }
    for id in ids.sorted() {
        let published = publishedPath(root: root, id: id, path)
        guard FileManager.default.fileExists(atPath: published) else { continue }
        if published.hasPrefix(downloads + "/" + id + "/") { return published }
        // A file of its own (`downloads/<id>.<name>`): its name alone does not say which directory it came from.
        if let log = FileManager.default.contents(atPath: root + "/uploads/\(id).log"),
            let line = log.split(separator: UInt8(ascii: "\n")).first,
            let meta = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any], meta["fileName"] as? String == path
        {
            return published
        }
    }
    throw HarnessError("\(path) is not among the served files")
}

/// Where `xfer serve` put upload `id`'s completed file `path`: `downloads/<id>/<path>`, or, for a
/// file created whole by one request, `downloads/<id>.<last component>` (Docs/cli.md).
func publishedPath(root: String, id: String, _ path: String) -> String {
    let inDirectory = root + "/downloads/\(id)/\(path)"
    if FileManager.default.fileExists(atPath: inDirectory) { return inDirectory }
    return root + "/downloads/\(id)." + (path.split(separator: "/").last.map(String.init) ?? path)
}

/// A TCP port on 127.0.0.1 nobody listens on now: for a receiver that must know, before it
/// starts, the address of the front (a proxy, a balancer) clients reach it through
/// (`--public-url`), where the front must know the receiver's port.
func freeTCPPort() throws -> Int {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw HarnessError("socket: \(errno)") }
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 }
    }
    guard bound else { throw HarnessError("bind: \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// The upload id of an upload URL's handle (`UploadHandles`: the id's 32 hex digits, then a tag of
/// 32): what names the upload's files and its download link.
func storedID(_ handle: some StringProtocol) -> String {
    String(handle.prefix(32))
}

/// What a receiver names its key of upload handles, beside its uploads (`ROOT/upload-urls.key`,
/// `PREFIX/upload-urls.key`): made once and kept, part of no upload.
let uploadHandleKeyName = "upload-urls.key"

/// The handle a receiver with `key` hands out for upload `id` (`UploadHandles`: the id, then the
/// first 16 bytes of an HMAC-SHA256 of it), for a test that learned only the id (a download link).
func uploadHandle(of id: String, key: Data) -> String {
    let tag = HMAC<SHA256>.authenticationCode(for: Data(id.utf8), using: SymmetricKey(data: key))
    return id + tag.prefix(16).map { String(format: "%02x", $0) }.joined()
}
